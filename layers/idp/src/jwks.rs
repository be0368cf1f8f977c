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
/// assert!(err.to_string().contains("no key"), "{err}");
/// ```
pub fn parse_jwks(text: &str) -> Result<Keys, JwksError> {
    if text.len() > MAX_JWKS_BYTES {
        return Err(JwksError::TooLarge { bytes: text.len() });
    }
    let doc: Value = serde_json::from_str(text).map_err(JwksError::NotJson)?;
    let Some(list) = doc.get("keys").and_then(Value::as_array) else {
        return Err(JwksError::NoKeysList);
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
                    return Err(JwksError::DuplicateKid { kid: kid.clone() });
                }
                keys.push(k);
            }
            Err(why) => skipped.push(format!("{name}: {why}")),
        }
    }
    if keys.is_empty() {
        return Err(JwksError::NoUsableKey { skipped });
    }
    Ok(Keys { keys, skipped })
}

/// Why a text is not a usable JWKS ([`parse_jwks`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JwksError {
    /// Larger than [`MAX_JWKS_BYTES`].
    #[error("the JWKS is {bytes} bytes, more than the {MAX_JWKS_BYTES} read")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Not JSON.
    #[error("the JWKS is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// No `keys` list.
    #[error("the JWKS has no `keys` list (expected `{{\"keys\": [...]}}`)")]
    NoKeysList,
    /// Two keys with one `kid`.
    #[error("two keys of the JWKS have the `kid` `{kid}`")]
    DuplicateKid {
        /// The `kid`.
        kid: String,
    },
    /// No key verifies signatures.
    #[error("the JWKS holds no key for verifying signatures ({})", left_out(.skipped))]
    NoUsableKey {
        /// The keys left out, each with why ([`Keys::skipped`]).
        skipped: Vec<String>,
    },
}

/// Why no key was usable: each key left out, or that there were none.
fn left_out(skipped: &[String]) -> String {
    if skipped.is_empty() {
        String::from("it is empty")
    } else {
        skipped.join("; ")
    }
}

/// Why one key of a JWKS is left out ([`Keys::skipped`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum Unusable {
    #[error("unreadable: {0}")]
    Unreadable(serde_json::Error),
    #[error("not a signature key (`use`)")]
    NotForSignatures,
    #[error("an EC curve toolgate does not verify")]
    Curve,
    #[error("a symmetric (`oct`) key, never taken: tokens must be signed with a private key")]
    Symmetric,
    #[error("a key type toolgate does not verify")]
    KeyType,
    #[error("its `alg` `{0}` is not a signature algorithm")]
    NotSignatureAlg(jsonwebtoken::jwk::KeyAlgorithm),
    #[error("its `alg` `{0:?}` does not fit its key type")]
    AlgForOtherType(Algorithm),
    #[error("unreadable key: {0}")]
    Key(jsonwebtoken::errors::Error),
}

pub(super) fn usable(raw: &Value) -> Result<Key, Unusable> {
    let jwk: Jwk = serde_json::from_value(raw.clone()).map_err(Unusable::Unreadable)?;
    if let Some(u) = &jwk.common.public_key_use
        && *u != PublicKeyUse::Signature
    {
        return Err(Unusable::NotForSignatures);
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
            _ => return Err(Unusable::Curve),
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            vec![Algorithm::EdDSA]
        }
        AlgorithmParameters::OctetKey(_) => return Err(Unusable::Symmetric),
        _ => return Err(Unusable::KeyType),
    };
    let algorithms = match &jwk.common.key_algorithm {
        None => by_type,
        Some(alg) => {
            let alg = Algorithm::from_str(&alg.to_string())
                .map_err(|_| Unusable::NotSignatureAlg(*alg))?;
            if !by_type.contains(&alg) {
                return Err(Unusable::AlgForOtherType(alg));
            }
            vec![alg]
        }
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(Unusable::Key)?;
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
