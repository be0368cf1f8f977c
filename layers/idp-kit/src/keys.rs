//! The tests' own signing keys (pre-generated fixtures, **never** for production), tokens
//! minted with them, and a loopback HTTP server serving their JWKS that counts its fetches.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test kit: a fixture that cannot be made fails the test that asked for it"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RSA1: &str = include_str!("../fixtures/rsa1.pem");
const RSA2: &str = include_str!("../fixtures/rsa2.pem");
const EC1: &str = include_str!("../fixtures/ec1.pem");
/// The public key of [`SigningKey::rsa1`] as PEM: what an attacker signs an HS256 token
/// with, hoping a verifier takes it as an HMAC secret.
pub const RSA1_PUBLIC_PEM: &str = include_str!("../fixtures/rsa1.pub.pem");

/// A signing key of the tests and its public JWK.
#[derive(Clone)]
pub struct SigningKey {
    /// Its `kid`.
    pub kid: String,
    /// The algorithm it signs with.
    pub alg: Algorithm,
    enc: EncodingKey,
    /// The public JWK (with `kid`, `use: sig` and `alg`).
    pub jwk: Value,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    fn new(pem: &str, alg: Algorithm, kid: &str) -> Self {
        let enc = match alg {
            Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem.as_bytes()),
            _ => EncodingKey::from_rsa_pem(pem.as_bytes()),
        }
        .expect("fixture key");
        let jwk = Jwk::from_encoding_key(&enc, alg).expect("public jwk");
        let mut jwk = serde_json::to_value(jwk).expect("jwk json");
        jwk["kid"] = json!(kid);
        jwk["use"] = json!("sig");
        Self {
            kid: kid.to_owned(),
            alg,
            enc,
            jwk,
        }
    }

    /// RSA key 1 (RS256), `kid` `rsa-1`.
    pub fn rsa1() -> Self {
        Self::new(RSA1, Algorithm::RS256, "rsa-1")
    }

    /// RSA key 2 (RS256), `kid` `rsa-2`: the rotated-to key.
    pub fn rsa2() -> Self {
        Self::new(RSA2, Algorithm::RS256, "rsa-2")
    }

    /// EC P-256 key 1 (ES256), `kid` `ec-1`.
    pub fn ec1() -> Self {
        Self::new(EC1, Algorithm::ES256, "ec-1")
    }

    /// The same key under another `kid`.
    pub fn with_kid(mut self, kid: &str) -> Self {
        self.kid = kid.to_owned();
        self.jwk["kid"] = json!(kid);
        self
    }

    /// A compact JWS of `claims`, signed, its header naming this key's `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&h, claims, &self.enc).expect("sign")
    }

    /// [`SigningKey::sign`] with the header `typ` given (`None`: no `typ` at all), as an
    /// RFC 9068 provider types its access tokens (`at+jwt`) or another kind of JWT is typed.
    pub fn sign_typed(&self, claims: &Value, typ: Option<&str>) -> String {
        let mut h = Header::new(self.alg);
        h.kid = Some(self.kid.clone());
        h.typ = typ.map(str::to_owned);
        jsonwebtoken::encode(&h, claims, &self.enc).expect("sign")
    }
}

/// A JWKS holding `keys`' public JWKs.
pub fn jwks(keys: &[&SigningKey]) -> Value {
    json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
}

/// Now, in seconds since the Unix epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Claims for `sub` from `iss` for `aud`, valid for an hour from a minute ago, with `extra`
/// merged in (which may override any of them).
pub fn claims(iss: &str, aud: &str, sub: &str, extra: Value) -> Value {
    let mut c = json!({"iss": iss, "aud": aud, "sub": sub, "iat": now() - 60,
        "nbf": now() - 60, "exp": now() + 3600});
    if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
        o.extend(e);
    }
    c
}

fn b64(bytes: &[u8]) -> String {
    base64_url::encode(bytes)
}

mod base64_url {
    /// Unpadded base64url.
    pub(super) fn encode(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let chars = chunk.len() + 1;
            for i in 0..chars {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        out
    }
}

/// A token with `alg: none` and no signature (`kid` named): never to be taken.
pub fn unsigned(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT", "kid": kid});
    format!(
        "{}.{}.",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// An HS256 token whose HMAC key is `secret` (the public key's PEM, for the algorithm
/// confusion attack), its header naming `kid`.
pub fn hs256(secret: &[u8], kid: &str, claims: &Value) -> String {
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some(kid.to_owned());
    jsonwebtoken::encode(
        &h,
        claims,
        &EncodingKey::from_secret(secret).expect("hmac key"),
    )
    .expect("sign hs256")
}

/// A loopback HTTP server answering every request with the JWKS it holds now.
#[derive(Debug, Clone)]
pub struct JwksServer {
    /// `http://127.0.0.1:PORT/jwks.json`.
    pub url: String,
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    /// Serves `jwks` on a loopback port (on the current Tokio runtime).
    pub async fn start(jwks: Value) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
        let s = Self {
            url,
            jwks: Arc::new(Mutex::new(jwks)),
            fetches: Arc::new(AtomicUsize::new(0)),
        };
        let (held, count) = (Arc::clone(&s.jwks), Arc::clone(&s.fetches));
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (held, count) = (Arc::clone(&held), Arc::clone(&count));
                tokio::spawn(async move {
                    let mut buf = vec![0_u8; 8192];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let body = held.lock().unwrap().to_string();
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(resp.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        s
    }

    /// Publishes `jwks` for the next fetch.
    pub fn publish(&self, jwks: Value) {
        *self.jwks.lock().unwrap() = jwks;
    }

    /// How many times the JWKS was fetched.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}
