//! Slack's interactive callback, `POST /v1/callbacks/slack`: arbitrary bytes as a callback
//! body never make `parse_callback` panic, and anything it reads is one button press with no
//! empty part (or the link button, with a user). The signature check never panics either, and a body signed with
//! `signature` always verifies under the same secret and timestamp.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate_web::slack::{SlackCallback, parse_callback, signature, verify};

fuzz_target!(|data: &[u8]| {
    match parse_callback(data) {
        Ok(SlackCallback::Answer(a)) => {
            assert!(!a.user.trim().is_empty());
            assert!(!a.interaction_id.trim().is_empty());
            assert!(!a.input_hash.trim().is_empty() && !a.definition_hash.trim().is_empty());
            assert!(!a.action_ts.trim().is_empty());
            assert!(a.response_url.is_none_or(|u| !u.trim().is_empty()));
        }
        Ok(SlackCallback::Opened { user }) => assert!(!user.trim().is_empty()),
        Err(_) => {}
    }
    let (secret, body) = data.split_at(data.len().min(16));
    let sig = signature(secret, "1700000000", body);
    assert!(verify(secret, Some("1700000000"), Some(&sig), body, 1_700_000_000).is_ok());
    let _ = verify(
        secret,
        Some("1700000000"),
        std::str::from_utf8(body).ok(),
        body,
        1_700_000_000,
    );
});
