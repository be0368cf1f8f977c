//! Arbitrary bytes as a JWKS and a bearer token (issue 22): `JWKS \n--\n TOKEN`, or a token
//! alone checked against the fixture keys. Parsing and verifying never panic, and a token
//! is only ever taken under an allowed asymmetric algorithm, from the configured issuer, for
//! the configured audience.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use toolgate_engine::ConfigErrors;
use toolgate_idp::JwtSettings;

const FIXTURE_JWKS: &str = include_str!("../../layers/idp-kit/fixtures/public-jwks.json");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (jwks, token) = match text.split_once("\n--\n") {
        Some((j, t)) => (j, t),
        None => (FIXTURE_JWKS, text),
    };
    let keys = match toolgate_idp::parse_jwks(jwks) {
        Ok(k) => k,
        Err(_) => match toolgate_idp::parse_jwks(FIXTURE_JWKS) {
            Ok(k) => k,
            Err(e) => panic!("the fixture JWKS must parse: {e}"),
        },
    };
    let _ = toolgate_idp::unverified_kid(token);
    let mut errs = ConfigErrors::default();
    let Some(settings) = JwtSettings::read(
        &json!({"issuer": "https://idp.test/", "audience": "http://127.0.0.1:8931/mcp",
                "jwks_file": "unused.json", "algorithms": ["RS256", "ES256", "PS256", "EdDSA"]}),
        "mcp.jwt",
        &[],
        &mut errs,
    ) else {
        panic!("the settings must read: {errs}");
    };
    if let Ok(v) = toolgate_idp::verify_with(&keys, &settings, token) {
        assert_eq!(v.principal.issuer, "https://idp.test/");
        assert_eq!(v.claims.get("iss"), Some(&json!("https://idp.test/")));
        let header = token.split('.').next().unwrap_or_default();
        assert!(!header.is_empty(), "a token without a header was taken");
    }
});
