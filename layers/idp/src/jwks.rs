//! The identity provider's keys: a JWKS document parsed into the keys an allowed algorithm
//! may verify with, held by `kid`.

use super::*;

/// The largest JWKS read or fetched.
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// One usable signing key of a JWKS.
#[derive(Clone)]
pub struct Key {
    pub(super) kid: Option<String>,
    /// The algorithms this key verifies (its type's and curve's, narrowed by its `alg`).
    pub(super) algorithms: Vec<Algorithm>,
    pub(super) key: DecodingKey,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("algorithms", &self.algorithms)
            .finish_non_exhaustive()
    }
}

impl Key {
    /// The key's `kid`, when it has one.
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }
}

/// The signing keys of a JWKS document: every asymmetric signature key it holds (keys for
/// encryption, symmetric `oct` keys and keys of unknown types are left out and named in
/// `skipped`).
///
/// # Errors
///
/// Text that is not a JWKS (`{"keys": [...]}`), two keys with one `kid`, or no usable key.
///
/// ```
/// let jwks = r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}"#;
/// let err = toolgate_idp::parse_jwks(jwks).unwrap_err();
/// assert!(err.contains("no key"), "{err}");
/// ```
pub fn parse_jwks(text: &str) -> Result<Keys, String> {
    if text.len() > MAX_JWKS_BYTES {
        return Err(format!(
            "the JWKS is {} bytes, more than the {MAX_JWKS_BYTES} read",
            text.len()
        ));
    }
    let doc: Value =
        serde_json::from_str(text).map_err(|e| format!("the JWKS is not JSON: {e}"))?;
    let Some(list) = doc.get("keys").and_then(Value::as_array) else {
        return Err(String::from(
            "the JWKS has no `keys` list (expected `{\"keys\": [...]}`)",
        ));
    };
    let mut keys = Vec::new();
    let mut skipped = Vec::new();
    for (i, raw) in list.iter().enumerate() {
        let kid = raw.get("kid").and_then(Value::as_str).map(str::to_owned);
        let name = kid
            .clone()
            .map_or_else(|| format!("keys[{i}]"), |k| format!("`{k}`"));
        match usable(raw) {
            Ok(k) => {
                if let Some(kid) = &k.kid
                    && keys.iter().any(|x: &Key| x.kid.as_ref() == Some(kid))
                {
                    return Err(format!("two keys of the JWKS have the `kid` `{kid}`"));
                }
                keys.push(k);
            }
            Err(why) => skipped.push(format!("{name}: {why}")),
        }
    }
    if keys.is_empty() {
        let why = if skipped.is_empty() {
            String::from("it is empty")
        } else {
            skipped.join("; ")
        };
        return Err(format!(
            "the JWKS holds no key for verifying signatures ({why})"
        ));
    }
    Ok(Keys { keys, skipped })
}

pub(super) fn usable(raw: &Value) -> Result<Key, String> {
    let jwk: Jwk = serde_json::from_value(raw.clone()).map_err(|e| format!("unreadable: {e}"))?;
    if let Some(u) = &jwk.common.public_key_use
        && *u != PublicKeyUse::Signature
    {
        return Err(String::from("not a signature key (`use`)"));
    }
    let by_type: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => return Err(String::from("an EC curve toolgate does not verify")),
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err(String::from(
                "a symmetric (`oct`) key, never taken: tokens must be signed with a private key",
            ));
        }
        _ => return Err(String::from("a key type toolgate does not verify")),
    };
    let algorithms = match &jwk.common.key_algorithm {
        None => by_type,
        Some(alg) => {
            let alg = Algorithm::from_str(&alg.to_string())
                .map_err(|_| format!("its `alg` `{alg}` is not a signature algorithm"))?;
            if !by_type.contains(&alg) {
                return Err(format!("its `alg` `{alg:?}` does not fit its key type"));
            }
            vec![alg]
        }
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("unreadable key: {e}"))?;
    Ok(Key {
        kid: jwk.common.key_id.clone(),
        algorithms,
        key,
    })
}

/// The usable keys of one JWKS ([`parse_jwks`]).
#[derive(Debug, Clone)]
pub struct Keys {
    pub(super) keys: Vec<Key>,
    pub(super) skipped: Vec<String>,
}

impl Keys {
    /// The usable keys.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// The keys left out, each with why.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    pub(super) fn find(&self, kid: Option<&str>, alg: Algorithm) -> Lookup<'_> {
        match kid {
            Some(kid) => match self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)) {
                None => Lookup::UnknownKid,
                Some(k) if k.algorithms.contains(&alg) => Lookup::Found(k),
                Some(_) => Lookup::Refused(format!(
                    "the key `{kid}` is not for `{alg:?}`: a key verifies only the algorithms of its type and its own `alg`"
                )),
            },
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.algorithms.contains(&alg));
                match (fitting.next(), fitting.next()) {
                    (Some(k), None) => Lookup::Found(k),
                    (None, _) => Lookup::Refused(format!(
                        "the token names no key (`kid`) and no key of the JWKS is for `{alg:?}`"
                    )),
                    (Some(_), Some(_)) => Lookup::Refused(String::from(
                        "the token names no key (`kid`) and several keys of the JWKS could have signed it",
                    )),
                }
            }
        }
    }
}

pub(super) enum Lookup<'a> {
    Found(&'a Key),
    UnknownKid,
    Refused(String),
}
