//! The verifier against tokens signed by the tests' own keys.

use serde_json::{Value, json};
use toolgate_engine::ConfigErrors;

use crate::{JwtSettings, MIN_REFETCH, Rejection, Verifier, parse_jwks};
use toolgate_idp_kit::{
    JwksServer, RSA1_PUBLIC_PEM, SigningKey, claims, hs256, jwks, now, unsigned,
};

const ISS: &str = "https://idp.test/";
const AUD: &str = "http://127.0.0.1:8931/mcp";

fn settings(keys: Value) -> JwtSettings {
    let mut v = json!({"issuer": ISS, "audience": AUD, "algorithms": ["RS256", "ES256"],
        "leeway_secs": 5, "required_scopes": ["mcp:tools"]});
    if let (Some(o), Value::Object(k)) = (v.as_object_mut(), keys) {
        o.extend(k);
    }
    let mut errs = ConfigErrors::default();
    let s = JwtSettings::read(&v, "mcp.jwt", &[], &mut errs);
    assert!(errs.is_empty(), "{errs}");
    s.unwrap()
}

fn good(extra: Value) -> Value {
    let mut c = claims(ISS, AUD, "alice", json!({"scope": "openid mcp:tools"}));
    if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
        o.extend(e);
    }
    c
}

async fn file_verifier(keys: &[&SigningKey]) -> (Verifier, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(keys).to_string()).unwrap();
    let v = Verifier::start(settings(json!({"jwks_file": path})), "mcp.jwt")
        .await
        .unwrap();
    (v, dir)
}

fn invalid(r: Result<crate::Verified, Rejection>) -> String {
    match r {
        Err(Rejection::Invalid(why)) => why,
        other => panic!("expected a 401 refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn issue22_rs256_and_es256_tokens_verify_and_name_their_principal() {
    let (rsa, ec) = (SigningKey::rsa1(), SigningKey::ec1());
    let (v, _dir) = file_verifier(&[&rsa, &ec]).await;
    for key in [&rsa, &ec] {
        let got = v
            .verify(&key.sign(&good(json!({"azp": "agent-a"}))))
            .await
            .unwrap();
        assert_eq!(got.principal.subject, "alice");
        assert_eq!(got.principal.issuer, ISS);
        assert_eq!(got.claim_str("azp"), Some("agent-a"));
        assert!(got.scopes.iter().any(|s| s == "mcp:tools"));
    }
    // `aud` as a list naming the audience is taken too.
    let list = good(json!({"aud": ["other", AUD]}));
    assert!(v.verify(&rsa.sign(&list)).await.is_ok());
}

#[tokio::test]
async fn issue22_time_issuer_and_audience_are_checked_with_the_leeway() {
    let rsa = SigningKey::rsa1();
    let (v, _dir) = file_verifier(&[&rsa]).await;
    let why = invalid(v.verify(&rsa.sign(&good(json!({"exp": now() - 60})))).await);
    assert!(why.contains("expired"), "{why}");
    let why = invalid(
        v.verify(&rsa.sign(&good(json!({"nbf": now() + 600}))))
            .await,
    );
    assert!(why.contains("not valid yet"), "{why}");
    // Within the five seconds of leeway: taken.
    assert!(
        v.verify(&rsa.sign(&good(json!({"exp": now() - 2}))))
            .await
            .is_ok()
    );
    let why = invalid(
        v.verify(&rsa.sign(&good(json!({"iss": "https://evil.test/"}))))
            .await,
    );
    assert!(why.contains("issuer"), "{why}");
    let why = invalid(
        v.verify(&rsa.sign(&good(json!({"aud": "http://elsewhere/mcp"}))))
            .await,
    );
    assert!(why.contains("audience"), "{why}");
    let mut no_exp = good(json!({}));
    no_exp.as_object_mut().unwrap().remove("exp");
    let why = invalid(v.verify(&rsa.sign(&no_exp)).await);
    assert!(why.contains("`exp`"), "{why}");
    let why = invalid(v.verify(&rsa.sign(&good(json!({"sub": 7})))).await);
    assert!(why.contains("sub"), "{why}");
}

#[tokio::test]
async fn issue22_none_and_hmac_with_the_public_key_are_refused() {
    let rsa = SigningKey::rsa1();
    let (v, _dir) = file_verifier(&[&rsa]).await;
    let why = invalid(v.verify(&unsigned("rsa-1", &good(json!({})))).await);
    assert!(why.contains("none"), "{why}");
    let confused = hs256(RSA1_PUBLIC_PEM.as_bytes(), "rsa-1", &good(json!({})));
    let why = invalid(v.verify(&confused).await);
    assert!(
        why.contains("HS256") && why.contains("not allowed"),
        "{why}"
    );
    // A signature by another key under the right `kid`.
    let forged = SigningKey::rsa2().with_kid("rsa-1").sign(&good(json!({})));
    let why = invalid(v.verify(&forged).await);
    assert!(why.contains("signature"), "{why}");
    assert!(invalid(v.verify("").await).contains("empty"));
    assert!(invalid(v.verify("not.a.jwt").await).contains("not a signed JWT"));
}

#[tokio::test]
async fn issue22_an_algorithm_must_fit_the_key_it_names() {
    // The EC key published under the RSA key's kid's neighbour: an RS256 token naming the
    // EC key's kid is refused by type, never tried.
    let (rsa, ec) = (SigningKey::rsa1(), SigningKey::ec1());
    let (v, _dir) = file_verifier(&[&rsa, &ec]).await;
    let wrong = rsa.clone().with_kid("ec-1").sign(&good(json!({})));
    let why = invalid(v.verify(&wrong).await);
    assert!(why.contains("not for `RS256`"), "{why}");
    // A key whose own `alg` is ES256 is not used for anything else; PS256 is not allowed.
    let mut pinned = rsa.jwk.clone();
    pinned["alg"] = json!("PS256");
    let keys = parse_jwks(&json!({"keys": [pinned]}).to_string()).unwrap();
    let r = crate::verify_with(
        &keys,
        &settings(json!({"jwks_file": "x"})),
        &rsa.sign(&good(json!({}))),
    );
    assert!(matches!(r, Err(crate::Failure::Rejected(_))), "{r:?}");
}

#[tokio::test]
async fn issue22_a_missing_scope_is_insufficient_not_invalid() {
    let rsa = SigningKey::rsa1();
    let (v, _dir) = file_verifier(&[&rsa]).await;
    let r = v.verify(&rsa.sign(&good(json!({"scope": "openid"})))).await;
    assert_eq!(
        r.unwrap_err(),
        Rejection::InsufficientScope {
            required: "mcp:tools".into()
        }
    );
    let scp = good(json!({"scope": null, "scp": ["mcp:tools"]}));
    let mut scp = scp;
    scp.as_object_mut().unwrap().remove("scope");
    assert!(v.verify(&rsa.sign(&scp)).await.is_ok());
}

#[tokio::test]
async fn issue22_an_unknown_kid_is_fetched_once_then_refused_and_rotation_is_taken() {
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::rsa2());
    let server = JwksServer::start(jwks(&[&k1])).await;
    let v = Verifier::start(settings(json!({"jwks_url": server.url})), "mcp.jwt")
        .await
        .unwrap();
    assert_eq!(server.fetches(), 1, "fetched at start");
    assert!(v.verify(&k1.sign(&good(json!({})))).await.is_ok());
    assert_eq!(server.fetches(), 1, "the cached keys serve");
    // The provider rotates to key 2 (and drops key 1): the first token naming it fetches.
    server.publish(jwks(&[&k2]));
    assert!(v.verify(&k2.sign(&good(json!({})))).await.is_ok());
    assert_eq!(server.fetches(), 2);
    // The removed key stops verifying: it is unknown now, and the refetch is rate-limited.
    let why = invalid(v.verify(&k1.sign(&good(json!({})))).await);
    assert!(why.contains("rsa-1"), "{why}");
    let made_up = k2.clone().with_kid("made-up");
    for _ in 0..5 {
        let why = invalid(v.verify(&made_up.sign(&good(json!({})))).await);
        assert!(why.contains("made-up"), "{why}");
    }
    assert_eq!(
        server.fetches(),
        2,
        "no fetch within {MIN_REFETCH:?} of the last"
    );
}

#[tokio::test]
async fn issue22_an_unknown_kid_refreshes_once_and_is_refused() {
    let k1 = SigningKey::rsa1();
    let server = JwksServer::start(jwks(&[&k1])).await;
    let v = Verifier::start(settings(json!({"jwks_url": server.url})), "mcp.jwt")
        .await
        .unwrap();
    let stranger = SigningKey::ec1();
    for expected in [2, 2, 2] {
        let why = invalid(v.verify(&stranger.sign(&good(json!({})))).await);
        assert!(why.contains("ec-1"), "{why}");
        assert_eq!(
            server.fetches(),
            expected,
            "one fetch for the unknown kid, then none"
        );
    }
}

#[tokio::test]
async fn issue22_keys_that_cannot_be_had_fail_the_start_naming_the_field() {
    let mut errs = ConfigErrors::default();
    let s = JwtSettings::read(
        &json!({"issuer": ISS, "audience": AUD, "jwks_file": "/nonexistent/jwks.json"}),
        "approvers.jwt",
        &[],
        &mut errs,
    )
    .unwrap();
    let e = Verifier::start(s, "approvers.jwt").await.unwrap_err();
    assert_eq!(e.errors[0].path, "approvers.jwt.jwks_file");
    let s = settings(json!({"jwks_url": "http://127.0.0.1:9/jwks.json"}));
    let e = Verifier::start(s, "mcp.jwt").await.unwrap_err();
    assert_eq!(e.errors[0].path, "mcp.jwt.jwks_url");
}

#[tokio::test]
async fn issue22_reload_drops_a_key_removed_from_the_file() {
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::rsa2());
    let (v, dir) = file_verifier(&[&k1, &k2]).await;
    assert!(v.verify(&k1.sign(&good(json!({})))).await.is_ok());
    std::fs::write(dir.path().join("jwks.json"), jwks(&[&k2]).to_string()).unwrap();
    v.reload().await.unwrap();
    assert!(invalid(v.verify(&k1.sign(&good(json!({})))).await).contains("rsa-1"));
    assert!(v.verify(&k2.sign(&good(json!({})))).await.is_ok());
    // A file that no longer reads refuses every token (fail closed).
    std::fs::write(dir.path().join("jwks.json"), "{").unwrap();
    assert!(v.reload().await.is_err());
    assert!(invalid(v.verify(&k2.sign(&good(json!({})))).await).contains("not available"));
}

#[test]
fn issue22_symmetric_and_encryption_keys_are_never_taken() {
    let rsa = SigningKey::rsa1();
    let mut enc = rsa.jwk.clone();
    enc["use"] = json!("enc");
    let text = json!({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}, enc]}).to_string();
    let err = parse_jwks(&text).unwrap_err().to_string();
    assert!(
        err.contains("symmetric") && err.contains("signature"),
        "{err}"
    );
    let mut twice = rsa.jwk.clone();
    twice["kid"] = json!("rsa-1");
    let err = parse_jwks(&json!({"keys": [rsa.jwk, twice]}).to_string())
        .unwrap_err()
        .to_string();
    assert!(err.contains("two keys"), "{err}");
    assert!(parse_jwks("[]").is_err());
}

#[tokio::test]
async fn issue22_keys_are_fetched_again_once_their_cache_lifetime_passed() {
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::rsa2());
    let server = JwksServer::start(jwks(&[&k1, &k2])).await;
    let v = Verifier::start(
        settings(json!({"jwks_url": server.url, "jwks_cache_secs": 1})),
        "mcp.jwt",
    )
    .await
    .unwrap();
    assert!(v.verify(&k1.sign(&good(json!({})))).await.is_ok());
    // The provider revokes key 1; within the cache lifetime it still verifies.
    server.publish(jwks(&[&k2]));
    assert!(v.verify(&k1.sign(&good(json!({})))).await.is_ok());
    assert_eq!(server.fetches(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    // Past it, the next token has the keys fetched again, and key 1 is gone.
    let why = invalid(v.verify(&k1.sign(&good(json!({})))).await);
    assert!(why.contains("rsa-1"), "{why}");
    assert_eq!(
        server.fetches(),
        2,
        "one fetch for the lifetime, none more for the kid"
    );
    assert!(v.verify(&k2.sign(&good(json!({})))).await.is_ok());
}

/// While the identity provider fails (here: an HTML page instead of a JWKS), a token naming an
/// unknown key id — sent by anyone, unauthenticated — never evicts the keys in hand, and
/// neither does the cache lifetime passing: every agent's token keeps verifying until a fetch
/// succeeds.
#[tokio::test]
async fn issue34_a_failing_provider_and_an_unknown_kid_never_evict_the_last_good_keys() {
    let (k1, k2) = (SigningKey::rsa1(), SigningKey::rsa2());
    let server = JwksServer::start(jwks(&[&k1])).await;
    let v = Verifier::start(
        settings(json!({"jwks_url": server.url, "jwks_cache_secs": 1})),
        "mcp.jwt",
    )
    .await
    .unwrap();
    let agent = k1.sign(&good(json!({})));
    assert!(v.verify(&agent).await.is_ok());
    server.publish(json!("<html>500 Internal Server Error</html>"));
    let stranger = k2.sign(&good(json!({})));
    assert!(invalid(v.verify(&stranger).await).contains("rsa-2"));
    assert_eq!(
        server.fetches(),
        2,
        "the unknown kid had the keys fetched again"
    );
    assert!(
        v.verify(&agent).await.is_ok(),
        "the failed fetch evicted nothing"
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert!(
        v.verify(&agent).await.is_ok(),
        "past the cache lifetime, the last good keys stay until a fetch succeeds"
    );
}

/// `https://` JWKS over real TLS on loopback, with a test CA.
mod tls {
    use super::*;
    use toolgate_idp_kit::tls::{TestCa, TlsServer};

    async fn https_verifier(url: &str, ca: Option<&std::path::Path>) -> Result<Verifier, String> {
        let mut keys = json!({"jwks_url": url, "jwks_cache_secs": 1});
        if let Some(ca) = ca {
            keys["ca_file"] = json!(ca);
        }
        Verifier::start(settings(keys), "mcp.jwt")
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn issue22_an_https_jwks_signed_by_the_configured_ca_verifies_tokens() {
        let rsa = SigningKey::rsa1();
        let ca = TestCa::new();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = ca.write(dir.path());
        let server =
            TlsServer::start(ca.server_cert(&["127.0.0.1", "localhost"]), jwks(&[&rsa])).await;
        for url in [
            server.url("/jwks.json"),
            server.url_as("localhost", "/jwks.json"),
        ] {
            let v = https_verifier(&url, Some(&ca_file)).await.unwrap();
            let got = v.verify(&rsa.sign(&good(json!({})))).await.unwrap();
            assert_eq!(got.principal.subject, "alice");
        }
        assert_eq!(server.served(), 2);
        assert!(server.last_request().starts_with("GET /jwks.json HTTP/1.1"));
    }

    #[tokio::test]
    async fn issue22_an_https_jwks_the_trust_does_not_cover_is_refused_at_start_naming_the_field() {
        let rsa = SigningKey::rsa1();
        let (ca, other) = (TestCa::new(), TestCa::new());
        let dir = tempfile::tempdir().unwrap();
        let ca_file = ca.write(dir.path());
        let other_dir = tempfile::tempdir().unwrap();
        let other_file = other.write(other_dir.path());
        let server = TlsServer::start(ca.server_cert(&["127.0.0.1"]), jwks(&[&rsa])).await;
        let url = server.url("/jwks.json");
        // No `ca_file`: the system's roots do not hold the test CA.
        let err = https_verifier(&url, None).await.unwrap_err();
        assert!(err.contains("mcp.jwt.jwks_url"), "{err}");
        assert!(err.contains("UnknownIssuer"), "{err}");
        // Another CA's file.
        let err = https_verifier(&url, Some(&other_file)).await.unwrap_err();
        assert!(err.contains("UnknownIssuer"), "{err}");
        // The right CA, a name the certificate is not for.
        let err = https_verifier(&server.url_as("localhost", "/jwks.json"), Some(&ca_file))
            .await
            .unwrap_err();
        assert!(err.contains("not valid for name \"localhost\""), "{err}");
        // Expired.
        server.serve_cert(ca.expired_server_cert(&["127.0.0.1"]));
        let err = https_verifier(&url, Some(&ca_file)).await.unwrap_err();
        assert!(err.contains("certificate expired"), "{err}");
        assert_eq!(
            server.served(),
            0,
            "no request went over a refused handshake"
        );
    }

    #[tokio::test]
    async fn issue22_a_jwks_refetch_over_a_certificate_the_trust_does_not_cover_takes_no_key() {
        let rsa = SigningKey::rsa1();
        let (ca, other) = (TestCa::new(), TestCa::new());
        let dir = tempfile::tempdir().unwrap();
        let ca_file = ca.write(dir.path());
        let server = TlsServer::start(ca.server_cert(&["127.0.0.1"]), jwks(&[&rsa])).await;
        let v = https_verifier(&server.url("/jwks.json"), Some(&ca_file))
            .await
            .unwrap();
        let token = rsa.sign(&good(json!({})));
        assert!(v.verify(&token).await.is_ok());
        // The server now shows a certificate of another CA (an impostor on the path): once
        // the cache lifetime passes, the refetch fails and takes nothing from it; the last
        // good keys stay in force until a fetch succeeds, and a token naming a key the
        // impostor might serve is refused.
        server.serve_cert(other.server_cert(&["127.0.0.1"]));
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        assert!(v.verify(&token).await.is_ok());
        let stranger = SigningKey::rsa2().sign(&good(json!({})));
        assert!(invalid(v.verify(&stranger).await).contains("rsa-2"));
        assert_eq!(server.served(), 1, "no key came over the refused handshake");
    }

    #[tokio::test]
    async fn issue22_a_ca_file_that_does_not_read_is_a_start_error_naming_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = https_verifier("https://127.0.0.1:1/jwks.json", Some(&missing))
            .await
            .unwrap_err();
        assert!(err.contains("mcp.jwt.ca_file"), "{err}");
        assert!(err.contains("cannot read the CA file"), "{err}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let err = https_verifier("https://127.0.0.1:1/jwks.json", Some(&junk))
            .await
            .unwrap_err();
        assert!(err.contains("mcp.jwt.ca_file"), "{err}");
        assert!(err.contains("holds no certificate"), "{err}");
    }
}

/// `iss` is the issuer as one string; a list that contains it is refused.
#[tokio::test]
async fn issue34_an_issuer_list_containing_the_issuer_is_refused() {
    let k1 = SigningKey::rsa1();
    let (v, _dir) = file_verifier(&[&k1]).await;
    assert!(v.verify(&k1.sign(&good(json!({})))).await.is_ok());
    let listed = k1.sign(&good(json!({"iss": [ISS, "https://elsewhere.example/"]})));
    assert!(invalid(v.verify(&listed).await).contains("issuer"));
}

/// Without `token_type`, a token whose header `typ` names another kind of JWT is refused
/// (RFC 8725 §3.11); an untyped, `JWT` or access-token-typed one is taken.
#[tokio::test]
async fn issue34_a_token_typed_as_another_kind_of_jwt_is_refused() {
    let k1 = SigningKey::rsa1();
    let (v, _dir) = file_verifier(&[&k1]).await;
    assert_eq!(v.token_type(), crate::TokenType::Any);
    let claims = good(json!({}));
    for typ in [
        None,
        Some("JWT"),
        Some("jwt"),
        Some("application/jwt"),
        Some("at+jwt"),
        Some("application/at+jwt"),
        Some("AT+JWT"),
    ] {
        let r = v.verify(&k1.sign_typed(&claims, typ)).await;
        assert!(r.is_ok(), "{typ:?}: {r:?}");
    }
    for typ in [
        "dpop+jwt",
        "logout+jwt",
        "secevent+jwt",
        "application/logout+jwt",
        "JOSE",
        "id_token+jwt",
        "",
    ] {
        let why = invalid(v.verify(&k1.sign_typed(&claims, Some(typ))).await);
        assert!(
            why.contains("`typ`") && why.contains("another kind of JWT"),
            "{typ}: {why}"
        );
    }
}

/// With `"token_type": "at+jwt"`, only RFC 9068 access tokens (`typ` `at+jwt` or
/// `application/at+jwt`, any case) are taken.
#[tokio::test]
async fn issue34_token_type_at_jwt_takes_only_access_tokens() {
    let k1 = SigningKey::rsa1();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&[&k1]).to_string()).unwrap();
    let section = json!({"token_type": "at+jwt"});
    let mut errs = ConfigErrors::default();
    let token_type = crate::TokenType::read(&section, "mcp.jwt", &mut errs);
    assert!(errs.is_empty(), "{errs}");
    let v = Verifier::start_typed(settings(json!({"jwks_file": path})), token_type, "mcp.jwt")
        .await
        .unwrap();
    assert_eq!(v.token_type(), crate::TokenType::AccessToken);
    let claims = good(json!({}));
    for typ in [
        "at+jwt",
        "application/at+jwt",
        "AT+JWT",
        "Application/At+Jwt",
    ] {
        let r = v.verify(&k1.sign_typed(&claims, Some(typ))).await;
        assert!(r.is_ok(), "{typ}: {r:?}");
    }
    for typ in [None, Some("JWT"), Some("dpop+jwt"), Some("at+jwt+x")] {
        let why = invalid(v.verify(&k1.sign_typed(&claims, typ)).await);
        assert!(
            why.contains("`token_type` requires `at+jwt`"),
            "{typ:?}: {why}"
        );
    }
    // The same token is taken by a verifier without `token_type` (the check is the
    // setting's, not a side effect of something else).
    let (plain, _d) = file_verifier(&[&k1]).await;
    assert!(plain.verify(&k1.sign_typed(&claims, None)).await.is_ok());
}

/// `token_type` is validated, its error named by its field.
#[test]
fn issue34_a_bad_token_type_names_its_field() {
    use crate::TokenType;
    for (value, want) in [
        (json!("at+jwt"), Some(TokenType::AccessToken)),
        (json!("application/at+jwt"), Some(TokenType::AccessToken)),
        (json!("AT+JWT"), Some(TokenType::AccessToken)),
        (json!("JWT"), None),
        (json!("dpop+jwt"), None),
        (json!(""), None),
        (json!(true), None),
        (json!(["at+jwt"]), None),
    ] {
        let mut errs = ConfigErrors::default();
        let got = TokenType::read(&json!({"token_type": value}), "mcp.jwt", &mut errs);
        match want {
            Some(t) => {
                assert_eq!(got, t, "{value}");
                assert!(errs.is_empty(), "{value}: {errs}");
            }
            None => {
                assert_eq!(got, TokenType::Any, "{value}");
                assert_eq!(errs.errors.len(), 1, "{value}");
                assert_eq!(errs.errors[0].path, "mcp.jwt.token_type", "{value}");
            }
        }
    }
    let mut errs = ConfigErrors::default();
    assert_eq!(
        TokenType::read(&json!({}), "approvers.jwt", &mut errs),
        TokenType::Any
    );
    assert!(errs.is_empty());
    assert_eq!(TokenType::AccessToken.config_value(), Some("at+jwt"));
    assert_eq!(TokenType::Any.config_value(), None);
}
