//! The redactor's unit tests (R33).

use super::patterns::{BUILTIN_PATTERNS, SHAPES, TextRule, key_value_regex};
use super::walk::MAX_EMBEDDED;
use super::*;
use regex::Regex;
use serde_json::Map;
use serde_json::json;
use toolgate_engine::recording::RedactionSettings;

fn text_of(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

/// Drops a deep value without recursing.
fn drop_iteratively(v: Value) {
    let mut stack = vec![v];
    while let Some(mut v) = stack.pop() {
        match &mut v {
            Value::Array(a) => stack.append(a),
            Value::Object(m) => stack.extend(std::mem::take(m).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[test]
fn r33_builtins_all_compile() {
    let r = Redactor::builder().key("pin").build().unwrap();
    for rules in [&Redactor::default().inner.rules, &r.inner.rules] {
        assert!(rules.iter().all(|r| !matches!(r, TextRule::Everything)));
        assert_eq!(rules.len(), BUILTIN_PATTERNS.len() + SHAPES.len());
    }
    for shape in SHAPES {
        assert!(Regex::new(&key_value_regex(*shape, None)).is_ok());
    }
}

#[test]
fn r33_bearer_and_nested_password_never_reach_input_or_output() {
    let r = Redactor::default();
    let input = json!({
        "request": {"headers": [{"name": "X-Trace", "value": "Bearer tok-in-123456"}]},
        "db": {"config": {"nested": {"password": "hunter2-in"}}},
    });
    let output = json!({
        "log": "sent Authorization: Bearer tok-out-654321 to host",
        "result": [{"user": {"Password": {"plain": "hunter2-out"}}}],
    });
    let clean_in = text_of(&r.redact_value("svc__call", &input));
    let clean_out = text_of(&r.redact_value("svc__call", &output));
    for (clean, secrets) in [
        (&clean_in, ["tok-in-123456", "hunter2-in"]),
        (&clean_out, ["tok-out-654321", "hunter2-out"]),
    ] {
        for secret in secrets {
            assert!(!clean.contains(secret), "{secret} leaked in {clean}");
        }
        assert!(clean.contains(REDACTED));
    }
    assert!(clean_in.contains("Bearer [REDACTED]"), "{clean_in}");
    assert!(clean_in.contains("X-Trace"));
}

#[test]
fn r33_every_default_pattern_is_redacted() {
    let r = Redactor::default();
    let cases: &[(&str, &str)] = &[
        ("Authorization: Bearer abc.DEF-ghi_123", "abc.DEF-ghi_123"),
        ("token is bearer Zm9vYmFy==", "Zm9vYmFy=="),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
            "eyJhbGciOiJIUzI1NiJ9",
        ),
        ("key AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
        ("temp ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            "gh ghp_1234567890abcdefghijABCDEFGHIJ123456",
            "ghp_1234567890abcdef",
        ),
        (
            "gh gho_16C7e42F292c6912E7710c838347Ae178B4a",
            "gho_16C7e42F292c",
        ),
        ("gh ghs_abcdefghij0123456789", "ghs_abcdefghij0123456789"),
        (
            "pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
            "github_pat_11ABCDEFG0123456789",
        ),
        ("slack xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012"),
        ("slack xoxp-1234-5678-abcd", "xoxp-1234-5678-abcd"),
        ("slack xoxa-2-abcdef123", "xoxa-2-abcdef123"),
        ("slack xoxr-refresh-1234", "xoxr-refresh-1234"),
        (
            "openai sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            "abcdefghijklmnopqrstuvwxyz",
        ),
        (
            "anthropic sk-ant-api03-abcdefghijklmnop",
            "api03-abcdefghijklmnop",
        ),
        (
            "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "4eC39HqLyjWDarjtT1zdp7dc",
        ),
        (
            "google AIzaSyA-1234567890abcdefghijklmnopqrstu",
            "AIzaSyA-1234567890",
        ),
        (
            "npm npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "npm_abcdefghijklmnop",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nq1w2e3r4\n-----END RSA PRIVATE KEY-----\nafter",
            "MIIEowIBAAKCAQEA7",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA",
            "b3BlbnNzaC1rZXktdjEA",
        ),
        (
            "GET /cb?code=1&access_token=ya29.a0Af-xyz&x=1",
            "ya29.a0Af-xyz",
        ),
        ("login password=hunter2&user=ada", "hunter2"),
        ("--client-secret='s p a c e d'", "s p a c e d"),
        ("DB_PASSWORD=\"pa ss\"", "pa ss"),
        ("postgres://ada:s3cret-pw@db.internal:5432/app", "s3cret-pw"),
        ("Cookie: sid=abc123; theme=dark", "sid=abc123"),
        ("X-Api-Key: live-key-998877", "live-key-998877"),
        ("  password: hunter2 ", "hunter2"),
        ("- token: t0k3n-in-a-list", "t0k3n-in-a-list"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        (
            "error: {'password': 'py-repr-pw', 'user': 'ada'}",
            "py-repr-pw",
        ),
        (
            "body was {\"token\": \"in-prose\", \"ok\": true} then",
            "in-prose",
        ),
        (
            "body was {\"secret\": {\"inner\": \"obj-val\"}, \"n\": 1}",
            "obj-val",
        ),
        ("truncated {\"password\": \"never-clos", "never-clos"),
        ("chained x=token=chained-val", "chained-val"),
        (
            "{'note': 'no end, 'api_key': 'after-unclosed'}",
            "after-unclosed",
        ),
    ];
    for (input, secret) in cases {
        let out = r.redact_text(input);
        assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
        assert!(out.contains(REDACTED), "{out:?}");
        // The same string as a structured value under an innocent key.
        let v = r.redact_value("t", &json!({"note": input}));
        assert!(!text_of(&v).contains(secret), "{secret:?} survived in {v}");
    }
}

#[test]
fn r33_context_around_a_match_is_kept() {
    let r = Redactor::default();
    assert_eq!(
        r.redact_text("use Bearer abc123 now"),
        "use Bearer [REDACTED] now"
    );
    assert_eq!(r.redact_text("k=AKIAIOSFODNN7EXAMPLE."), "k=[REDACTED].");
    assert_eq!(
        r.redact_text("-----BEGIN PRIVATE KEY-----\nAAA\n-----END PRIVATE KEY-----\nnext line"),
        "[REDACTED]\nnext line"
    );
    assert_eq!(
        r.redact_text("https://x.test/?token=abc&page=2"),
        "https://x.test/?token=[REDACTED]&page=2"
    );
    assert_eq!(
        r.redact_text("Authorization: Basic abc"),
        "Authorization: Basic [REDACTED]"
    );
    assert_eq!(
        r.redact_text("https://ada:pw@host/"),
        "https://ada:[REDACTED]@host/"
    );
}

#[test]
fn r33_json_in_a_string_is_redacted_structurally() {
    let r = Redactor::default();
    let inner = json!({"user": "ada", "auth": {"scheme": "basic", "value": "opaque-credential"}});
    let once = inner.to_string();
    let twice = json!({"payload": once}).to_string();
    let v = json!({"body": once, "wrapped": twice, "list": [once]});
    let clean = r.redact_value("t", &v);
    let s = text_of(&clean);
    assert!(!s.contains("opaque-credential"), "{s}");
    let body: Value = serde_json::from_str(clean["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, json!({"user": "ada", "auth": REDACTED}));
    // Text that looks like JSON but is not is scanned as text.
    assert_eq!(
        r.redact_text("[INFO] token=abc123 issued"),
        "[INFO] token=[REDACTED] issued"
    );
    // Whole text that is JSON is redacted structurally too.
    assert_eq!(
        r.redact_text(r#"{"api_key": ["a", "b"], "n": 1}"#),
        r#"{"api_key":"[REDACTED]","n":1}"#
    );
}

#[test]
fn r33_embedded_json_is_always_reserialised() {
    let r = Redactor::default();
    // serde_json keeps the last of two duplicate keys; the first must not survive.
    let sneaky = r#"{"note": "ghp_1234567890abcdefghij0000", "note": "fine"}"#;
    let out = r.redact_text(sneaky);
    assert!(!out.contains("ghp_"), "{out}");
    assert_eq!(out, r#"{"note":"fine"}"#);
}

#[test]
fn r33_key_name_variants() {
    let r = Redactor::default();
    let keys = [
        "password",
        "PASSWORD",
        "passwd",
        "db_password",
        "X-Api-Key",
        "api_key",
        "apiKey",
        "client_secret",
        "clientSecret",
        "sessionToken",
        "session_id",
        "Authorization",
        "proxy-authorization",
        "auth",
        "oauth_token",
        "Set-Cookie",
        "cookie",
        "private_key",
        "privateKey",
        "credentials",
        "aws_access_key_id",
        "refresh_token",
        "bearer",
        "my.secret.value",
    ];
    for k in keys {
        let mut m = Map::new();
        m.insert(k.to_owned(), json!({"deep": ["x-value-x"]}));
        let out = r.redact_value("t", &Value::Object(m));
        assert_eq!(out[k], REDACTED, "{k}");
        assert!(r.is_secret_key(k), "{k}");
    }
    for k in [
        "title",
        "author",
        "authority",
        "authors",
        "name",
        "description",
        "id",
    ] {
        assert!(!r.is_secret_key(k), "{k}");
    }
    // Every type under a secret key is redacted.
    for v in [
        json!(null),
        json!(12345),
        json!(true),
        json!([1, 2]),
        json!("s"),
    ] {
        assert_eq!(r.redact_value("t", &json!({"token": v}))["token"], REDACTED);
    }
}

#[test]
fn r33_non_secret_content_is_unchanged() {
    let r = Redactor::default();
    let v = json!({
        "title": "token bucket algorithm",
        "author": "Ada Lovelace",
        "body": "Sessions expire after an hour; rotate your password often.",
        "skills": ["sk-learn", "risk-analysis"],
        "count": 3,
        "ok": true,
        "nothing": null,
        "url": "https://example.com/a?page=2&sort=asc",
        "expr": "a = b + c",
    });
    assert_eq!(r.redact_value("t", &v), v);
    let prose = "A token bucket algorithm limits each session; see the Authorization section.";
    assert_eq!(r.redact_text(prose), prose);
}

#[test]
fn r33_secret_in_a_key_name_is_redacted() {
    let r = Redactor::default();
    let v = json!({"AKIAIOSFODNN7EXAMPLE": {"region": "eu"}});
    let out = text_of(&r.redact_value("t", &v));
    assert!(!out.contains("AKIAIOSFODNN7EXAMPLE"), "{out}");
    assert!(out.contains("eu"));
}

#[test]
fn r33_pointer_applies_only_to_its_tool() {
    let r = Redactor::builder()
        .pointer("CRM__Lookup", "/customer/ssn")
        .pointer("crm__lookup", "/rows/*/card")
        .pointer("crm__lookup", "/a~1b/c~0d")
        .pointer("crm__lookup", "/list/1")
        .pointer("vault__read", "")
        .build()
        .unwrap();
    let v = json!({
        "customer": {"ssn": "078-05-1120", "name": "Ada"},
        "rows": [{"card": "4111", "id": 1}, {"card": "5500", "id": 2}],
        "a/b": {"c~d": "odd-key", "other": 1},
        "list": ["zero", "one", "two"],
    });
    let out = r.redact_value("crm__LOOKUP", &v);
    assert_eq!(out["customer"], json!({"ssn": REDACTED, "name": "Ada"}));
    assert_eq!(
        out["rows"],
        json!([{"card": REDACTED, "id": 1}, {"card": REDACTED, "id": 2}])
    );
    assert_eq!(out["a/b"], json!({"c~d": REDACTED, "other": 1}));
    assert_eq!(out["list"], json!(["zero", REDACTED, "two"]));
    // Another tool: untouched.
    assert_eq!(r.redact_value("crm__other", &v), v);
    // The empty pointer is the whole content.
    assert_eq!(r.redact_value("vault__read", &v), json!(REDACTED));
    // Missing paths change nothing.
    assert_eq!(
        r.redact_value("crm__lookup", &json!({"x": 1})),
        json!({"x": 1})
    );
}

#[test]
fn r33_invalid_rules_are_all_collected_with_paths() {
    let err = Redactor::builder()
        .pattern("ok-[0-9]+")
        .pattern("(unclosed")
        .pattern("[z-a]")
        .pointer("t", "no-slash")
        .pointer("t", "/fine")
        .pointer("t", "/bad~2escape")
        .pointer("", "/x")
        .key("   ")
        .build()
        .unwrap_err();
    let paths: Vec<&str> = err.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "redaction.keys[0]",
            "redaction.patterns[1]",
            "redaction.patterns[2]",
            "redaction.pointers[0]",
            "redaction.pointers[2]",
            "redaction.pointers[3]",
        ]
    );
    assert!(err.errors.iter().all(|e| {
        let m = &e.message;
        m.chars().next().is_some_and(|c| !c.is_uppercase()) && !m.ends_with('.')
    }));
    assert!(
        err.to_string()
            .contains("`(unclosed` is not a valid regular expression")
    );
}

#[test]
fn r33_regex_size_limit_is_a_config_error() {
    let err = Redactor::builder()
        .regex_size_limit(100)
        .pattern(r"\w{50}")
        .build()
        .unwrap_err();
    assert_eq!(err.errors[0].path, "redaction.patterns[0]");
}

#[test]
fn r33_added_pattern_and_key() {
    let r = Redactor::builder()
        .pattern(r"EMP-\d{6}")
        .pattern(r"pin (?P<secret>\d{4})")
        .pattern("x*")
        .key("ssn")
        .build()
        .unwrap();
    assert_eq!(r.redact_text("id EMP-123456 ok"), "id [REDACTED] ok");
    assert_eq!(r.redact_text("pin 1234 please"), "pin [REDACTED] please");
    assert_eq!(r.redact_text("aaa xx bbb"), "aaa [REDACTED] bbb");
    assert_eq!(r.redact_text("héllo"), "héllo");
    assert_eq!(
        r.redact_value("t", &json!({"customer_SSN": "078-05-1120"})),
        json!({"customer_SSN": REDACTED})
    );
}

#[test]
fn r33_never_fails_open() {
    // Depth: exactly at the limit is kept, one past it is redacted whole.
    let r = Redactor::builder().max_depth(3).build().unwrap();
    assert_eq!(r.redact_value("t", &json!([[[1]]])), json!([[[1]]]));
    assert_eq!(
        r.redact_value("t", &json!({"a": [[{"b": 1}]], "c": 2})),
        json!({"a": [[REDACTED]], "c": 2})
    );
    // The depth of JSON-in-string counts from where the string sits.
    assert_eq!(
        r.redact_value("t", &json!([["[[\"x\"]]"]])),
        json!([["[\"[REDACTED]\"]"]])
    );
    // JSON text too deep to parse is not treated as text.
    let deep_text = format!(
        "{}\"password\": \"x\"{}",
        "{\"a\":".repeat(200),
        "}".repeat(200)
    );
    assert_eq!(Redactor::default().redact_text(&deep_text), REDACTED);
    // JSON-in-string nested past the embedding limit is redacted whole.
    let mut s = json!(["plain"]).to_string();
    for _ in 0..MAX_EMBEDDED + 1 {
        s = Value::Array(vec![Value::String(s)]).to_string();
    }
    assert_eq!(
        Redactor::default()
            .redact_text(&s)
            .matches(REDACTED)
            .count(),
        1
    );
}

#[test]
fn r33_deep_input_is_redacted_without_overflow() {
    let r = Redactor::default();
    let secret = "ghp_deepdeepdeep0123456789";
    let mut v = json!({"password": secret, "note": secret});
    for i in 0..100_000 {
        v = if i % 2 == 0 {
            Value::Array(vec![v])
        } else {
            // Not `json!`: it would copy `v` through `to_value`, recursively.
            Value::Object(Map::from_iter([("k".to_owned(), v)]))
        };
    }
    let out = r.redact_value("t", &v);
    drop_iteratively(v);
    let s = text_of(&out);
    assert!(!s.contains(secret));
    assert!(s.contains(REDACTED));
    assert_eq!(
        toolgate_core::json::value_depth(&out, 1000),
        DEFAULT_MAX_DEPTH
    );

    let deep_text = "[".repeat(100_000) + &"]".repeat(100_000);
    assert_eq!(r.redact_text(&deep_text), REDACTED);
}

#[test]
fn r33_truncate_at_a_multibyte_boundary() {
    let r = Redactor::builder().max_text_bytes(5).build().unwrap();
    // "aé€" is 1 + 2 + 3 bytes; 5 falls inside "€".
    assert_eq!(r.truncate("aé€z"), "aé…[truncated 4 bytes]");
    assert_eq!(r.truncate("short"), "short");
    assert_eq!(r.truncate("€€"), "€…[truncated 3 bytes]");
    let r = Redactor::builder().max_text_bytes(2).build().unwrap();
    assert_eq!(r.truncate("€"), "…[truncated 3 bytes]");
    assert_eq!(Redactor::default().max_text_bytes(), DEFAULT_MAX_TEXT_BYTES);
    let r = Redactor::builder().max_text_bytes(12).build().unwrap();
    let out = r.redact_and_truncate("x Bearer abcdefghijklmnop y");
    assert!(!out.contains("abcdef"), "{out}");
    assert!(out.starts_with("x Bearer [RE"), "{out}");
}

#[test]
fn r33_from_settings() {
    let settings = RedactionSettings {
        keys: vec!["ssn".into()],
        patterns: vec![r"EMP-\d+".into()],
        pointers: vec![("hr__get".into(), "/salary".into())],
        max_text_bytes: Some(10),
        ..RedactionSettings::default()
    };
    let r = RedactorBuilder::from_settings(&settings).build().unwrap();
    assert_eq!(
        r.redact_value("hr__get", &json!({"ssn": 1, "salary": 2, "id": "EMP-9"})),
        json!({"ssn": REDACTED, "salary": REDACTED, "id": REDACTED})
    );
    assert_eq!(r.max_text_bytes(), 10);
}
