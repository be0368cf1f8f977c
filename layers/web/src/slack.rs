//! Slack's interactive callbacks on the wire: the request signature (v0, HMAC-SHA256 over
//! `v0:<timestamp>:<body>` with the app's signing secret, from the `hmac` crate, compared in
//! constant time), the timestamp window, and the callback body — `payload=<JSON>`,
//! form-encoded (`form_urlencoded`) — read into the one press it carries. Pure functions over
//! bytes, so they are fuzzed (`fuzz/fuzz_targets/slack_callback.rs`) apart from the server.
//!
//! ```
//! use toolgate_web::slack::{SlackCallback, SlackDecision, parse_callback, signature, verify};
//! let body = "payload=%7B%22type%22%3A%22block_actions%22%2C%22user%22%3A%7B%22id%22%3A%22U1%22%7D%2C%22actions%22%3A%5B%7B%22action_id%22%3A%22approve%22%2C%22value%22%3A%22ia_1%7Csha256%3Aa%7Csha256%3Ab%22%2C%22action_ts%22%3A%221.2%22%7D%5D%7D";
//! let sig = signature(b"secret", "1700000000", body.as_bytes());
//! assert!(verify(b"secret", Some("1700000000"), Some(&sig), body.as_bytes(), 1_700_000_100).is_ok());
//! assert!(verify(b"secret", Some("1700000000"), Some(&sig), body.as_bytes(), 1_700_000_400).is_err());
//! let SlackCallback::Answer(a) = parse_callback(body.as_bytes()).unwrap() else { panic!() };
//! assert_eq!((a.user.as_str(), a.decision, a.interaction_id.as_str()), ("U1", SlackDecision::Approve, "ia_1"));
//! ```

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

/// How far a request's timestamp may be from now, either way: five minutes.
pub const MAX_SKEW_SECS: i64 = 300;

/// The largest callback body read (Slack's are a few KiB; a message's blocks ride along).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The start of every `response_url` Slack hands out: a press's message is updated only
/// through such a URL (the default of [`crate::WebSettings::slack_response_url_prefix`]).
pub const SLACK_RESPONSE_URL_PREFIX: &str = "https://hooks.slack.com/";

fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length (a longer one than the block is hashed first, RFC
    // 2104): `new_from_slice` never refuses one; were it to, the all-zero key signs nothing
    // Slack sent.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret)
        .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    mac
}

/// The `X-Slack-Signature` Slack sends for `body` at `timestamp`: `v0=` and the hex of
/// HMAC-SHA256(`secret`, `v0:<timestamp>:<body>`).
///
/// ```
/// // Slack's documented example ("Verifying requests from Slack").
/// let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
/// assert_eq!(
///     toolgate_web::slack::signature(b"8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
///     "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
/// );
/// ```
pub fn signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let tag = mac(secret, timestamp, body).finalize().into_bytes();
    let mut out = String::from("v0=");
    toolgate_core::id::push_hex(&mut out, &tag);
    out
}

/// Why a callback's signature or timestamp was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackRefusal {
    /// A header is missing or unreadable.
    Missing(&'static str),
    /// The timestamp is more than [`MAX_SKEW_SECS`] from now.
    Stale {
        /// The request's timestamp.
        timestamp: i64,
        /// Now.
        now: i64,
    },
    /// The signature is not the body's.
    BadSignature,
}

impl std::fmt::Display for SlackRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlackRefusal::Missing(h) => write!(f, "the `{h}` header is missing or unreadable"),
            SlackRefusal::Stale { timestamp, now } => write!(
                f,
                "the request's timestamp `{timestamp}` is {} s from now, more than {MAX_SKEW_SECS} s",
                (now - timestamp).abs()
            ),
            SlackRefusal::BadSignature => {
                f.write_str("the request's signature is not the signing secret's for its body")
            }
        }
    }
}

impl std::error::Error for SlackRefusal {}

/// The 32 bytes of a `v0=` signature's hex, or `None` when it is not one.
fn signature_bytes(given: &str) -> Option<Vec<u8>> {
    let hex = given.strip_prefix("v0=")?;
    if hex.len() != 64 {
        return None;
    }
    (0..32)
        .map(|i| {
            hex.get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect()
}

/// Checks a callback: `timestamp` (`X-Slack-Request-Timestamp`, whole seconds) within
/// [`MAX_SKEW_SECS`] of `now`, and `sig` (`X-Slack-Signature`) the body's, compared in
/// constant time (`hmac`'s `verify_slice`).
///
/// # Errors
///
/// [`SlackRefusal`]: a header missing or unreadable, a stale timestamp, a signature that is
/// not the body's under `secret`.
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    sig: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), SlackRefusal> {
    let ts_text = timestamp.ok_or(SlackRefusal::Missing("X-Slack-Request-Timestamp"))?;
    let ts: i64 = ts_text
        .trim()
        .parse()
        .map_err(|_| SlackRefusal::Missing("X-Slack-Request-Timestamp"))?;
    if (now.saturating_sub(ts)).abs() > MAX_SKEW_SECS {
        return Err(SlackRefusal::Stale { timestamp: ts, now });
    }
    let given = sig.ok_or(SlackRefusal::Missing("X-Slack-Signature"))?;
    let tag = signature_bytes(given).ok_or(SlackRefusal::BadSignature)?;
    mac(secret, ts_text, body)
        .verify_slice(&tag)
        .map_err(|_| SlackRefusal::BadSignature)
}

/// Approve or Deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlackDecision {
    /// The Approve button (`action_id: approve`).
    Approve,
    /// The Deny button (`action_id: deny`).
    Deny,
}

/// The one answer a press of Approve or Deny carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackAction {
    /// The Slack user who pressed the button (`user.id`).
    pub user: String,
    /// Which button.
    pub decision: SlackDecision,
    /// The held call (from the button's `value`).
    pub interaction_id: String,
    /// The input hash the card showed (R35).
    pub input_hash: String,
    /// The definition hash the card showed (R35).
    pub definition_hash: String,
    /// The action's `action_ts`: the same press, retried, has the same one.
    pub action_ts: String,
    /// Where Slack takes the message's update and the presser's ephemeral replies
    /// (`response_url`; Slack ignores the HTTP reply to a button press).
    pub response_url: Option<String>,
}

/// What one interactive callback carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackCallback {
    /// A press of Approve or Deny.
    Answer(SlackAction),
    /// A press of the message's link button ("Open the card", `action_id: open`): Slack opens
    /// the link itself and still calls back; there is nothing to answer.
    Opened {
        /// The Slack user who pressed it.
        user: String,
    },
}

/// Reads a callback body: form-encoded with one `payload` field holding Slack's JSON
/// (`type: block_actions`, `user.id`, one action: `approve` or `deny` whose `value` is
/// `<interaction id>|<input hash>|<definition hash>`, or the link button `open`). Anything
/// else is refused with why; nothing recursive runs on the JSON before its depth is bounded.
///
/// # Errors
///
/// Why the body is not one press: too large, no or two `payload` fields, JSON that does not
/// read or nests too deep, another `type`, a missing user, other than one action, an
/// unknown `action_id`, a `value` not of three non-empty parts, a missing `action_ts`.
pub fn parse_callback(body: &[u8]) -> Result<SlackCallback, CallbackError> {
    use CallbackError::Missing;
    if body.len() > MAX_BODY_BYTES {
        return Err(CallbackError::TooLarge);
    }
    let mut payload = None;
    for (key, value) in form_urlencoded::parse(body) {
        if key == "payload" {
            if payload.is_some() {
                return Err(CallbackError::TwoPayloads);
            }
            payload = Some(value);
        }
    }
    let text = payload.ok_or(CallbackError::NoPayload)?;
    if toolgate_core::json::raw_depth(&text) > 32 {
        return Err(CallbackError::TooDeep);
    }
    let v: Value = serde_json::from_str(&text).map_err(CallbackError::NotJson)?;
    match v.get("type").and_then(Value::as_str) {
        Some("block_actions") => {}
        Some(t) => {
            return Err(CallbackError::OtherType { kind: t.to_owned() });
        }
        None => return Err(Missing("payload.type")),
    }
    let user = v
        .pointer("/user/id")
        .and_then(Value::as_str)
        .filter(|u| !u.trim().is_empty())
        .ok_or(Missing("payload.user.id"))?;
    let actions = v
        .get("actions")
        .and_then(Value::as_array)
        .ok_or(Missing("payload.actions"))?;
    let [action] = actions.as_slice() else {
        return Err(CallbackError::Actions {
            count: actions.len(),
        });
    };
    let decision = match action.get("action_id").and_then(Value::as_str) {
        Some("approve") => SlackDecision::Approve,
        Some("deny") => SlackDecision::Deny,
        Some("open") => {
            return Ok(SlackCallback::Opened {
                user: user.to_owned(),
            });
        }
        Some(other) => {
            return Err(CallbackError::UnknownAction {
                action_id: other.to_owned(),
            });
        }
        None => return Err(Missing("payload.actions[0].action_id")),
    };
    let value = action
        .get("value")
        .and_then(Value::as_str)
        .ok_or(Missing("payload.actions[0].value"))?;
    let parts: Vec<&str> = value.split('|').collect();
    let [id, ih, dh] = parts.as_slice() else {
        return Err(CallbackError::ValueParts);
    };
    if [id, ih, dh].iter().any(|p| p.trim().is_empty()) {
        return Err(CallbackError::EmptyPart);
    }
    let action_ts = action
        .get("action_ts")
        .and_then(Value::as_str)
        .filter(|t| !t.trim().is_empty())
        .ok_or(Missing("payload.actions[0].action_ts"))?;
    let response_url = match v.get("response_url") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) if !u.trim().is_empty() => Some(u.clone()),
        Some(_) => return Err(CallbackError::ResponseUrl),
    };
    Ok(SlackCallback::Answer(SlackAction {
        user: user.to_owned(),
        decision,
        interaction_id: (*id).to_owned(),
        input_hash: (*ih).to_owned(),
        definition_hash: (*dh).to_owned(),
        action_ts: action_ts.to_owned(),
        response_url,
    }))
}

/// Why a callback body is not one button press ([`parse_callback`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallbackError {
    /// Larger than Slack sends.
    #[error("the body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// Two `payload` fields.
    #[error("the body has more than one `payload`")]
    TwoPayloads,
    /// No `payload` field.
    #[error("the body has no `payload` field")]
    NoPayload,
    /// A `payload` nested too deep to read.
    #[error("`payload` nests deeper than 32 levels")]
    TooDeep,
    /// A `payload` that is not JSON.
    #[error("`payload` is not JSON: {0}")]
    NotJson(serde_json::Error),
    /// Another kind of interaction than a button press.
    #[error("`payload.type` is `{kind}`, not `block_actions`")]
    OtherType {
        /// The `type` sent.
        kind: String,
    },
    /// A field the press must have.
    #[error("`{0}` is missing")]
    Missing(&'static str),
    /// Other than one action.
    #[error("`payload.actions` has {count} actions; a button press has one")]
    Actions {
        /// How many.
        count: usize,
    },
    /// An action of none of toolgate's buttons.
    #[error("`payload.actions[0].action_id` is `{action_id}`, not `approve`, `deny` or `open`")]
    UnknownAction {
        /// The `action_id` sent.
        action_id: String,
    },
    /// A `value` that is not three parts.
    #[error("`payload.actions[0].value` is not `<interaction>|<input hash>|<definition hash>`")]
    ValueParts,
    /// A `value` with an empty part.
    #[error("`payload.actions[0].value` has an empty part")]
    EmptyPart,
    /// A `response_url` that is not a URL.
    #[error("`payload.response_url` is not a URL")]
    ResponseUrl,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_mac(key: &[u8], message: &[u8]) -> String {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        m.update(message);
        let mut hex = String::new();
        toolgate_core::id::push_hex(&mut hex, &m.finalize().into_bytes());
        hex
    }

    #[test]
    fn hmac_matches_rfc4231_and_slacks_documented_example() {
        // RFC 4231, test case 2.
        assert_eq!(
            hex_mac(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // A key longer than the block is hashed first (RFC 4231, test case 6).
        assert_eq!(
            hex_mac(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            ),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
        // Slack's documented example ("Verifying requests from Slack").
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        assert_eq!(
            signature(b"8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }

    #[test]
    fn a_callback_is_refused_when_stale_forged_or_unsigned() {
        let body = b"payload=x";
        let sig = signature(b"s", "1000", body);
        assert!(verify(b"s", Some("1000"), Some(&sig), body, 1000 + 300).is_ok());
        assert!(verify(b"s", Some("1000"), Some(&sig), body, 1000 - 300).is_ok());
        assert!(matches!(
            verify(b"s", Some("1000"), Some(&sig), body, 1301),
            Err(SlackRefusal::Stale { .. })
        ));
        assert_eq!(
            verify(b"other", Some("1000"), Some(&sig), body, 1000),
            Err(SlackRefusal::BadSignature)
        );
        assert_eq!(
            verify(b"s", Some("1000"), Some(&sig), b"payload=y", 1000),
            Err(SlackRefusal::BadSignature)
        );
        // Upper-case hex is the same bytes; a signature of another shape is not one.
        assert!(
            verify(
                b"s",
                Some("1000"),
                Some(&sig.to_uppercase().replace("V0=", "v0=")),
                body,
                1000
            )
            .is_ok()
        );
        for bad in ["", "v0=", "v1=00", "v0=zz", &sig[..sig.len() - 1]] {
            assert_eq!(
                verify(b"s", Some("1000"), Some(bad), body, 1000),
                Err(SlackRefusal::BadSignature),
                "{bad}"
            );
        }
        assert!(verify(b"s", None, Some(&sig), body, 1000).is_err());
        assert!(verify(b"s", Some("1000"), None, body, 1000).is_err());
        assert!(verify(b"s", Some("soon"), Some(&sig), body, 1000).is_err());
    }

    fn encoded(payload: &str) -> String {
        let mut body = String::from("payload=");
        for b in payload.bytes() {
            body.push_str(&format!("%{b:02X}"));
        }
        body
    }

    #[test]
    fn a_callback_body_is_read_or_refused_with_why() {
        let ok = |payload: &str| parse_callback(encoded(payload).as_bytes());
        let SlackCallback::Answer(a) = ok(r#"{"type":"block_actions","user":{"id":"U9"},"response_url":"https://hooks.slack.com/actions/T1/2/x","actions":[{"action_id":"deny","value":"ia|h1|h2","action_ts":"7.1"}]}"#).unwrap() else {
            panic!()
        };
        assert_eq!(a.decision, SlackDecision::Deny);
        assert_eq!(
            (a.input_hash.as_str(), a.definition_hash.as_str()),
            ("h1", "h2")
        );
        assert_eq!(
            a.response_url.as_deref(),
            Some("https://hooks.slack.com/actions/T1/2/x")
        );
        // The link button calls back too: read, with nothing to answer.
        assert_eq!(
            ok(r#"{"type":"block_actions","user":{"id":"U9"},"actions":[{"action_id":"open","url":"https://toolgate.example/calls/ia"}]}"#).unwrap(),
            SlackCallback::Opened { user: "U9".into() }
        );
        // `+` is a space in a form body.
        let plus = "payload=%7B%22type%22:%22block_actions%22,%22user%22:%7B%22id%22:%22U+9%22%7D,%22actions%22:%5B%7B%22action_id%22:%22open%22%7D%5D%7D";
        assert_eq!(
            parse_callback(plus.as_bytes()).unwrap(),
            SlackCallback::Opened { user: "U 9".into() }
        );
        for bad in [
            r#"{"type":"view_submission"}"#,
            r#"{"type":"block_actions","actions":[]}"#,
            r#"{"type":"block_actions","user":{"id":"U9"},"actions":[]}"#,
            r#"{"type":"block_actions","user":{"id":"U9"},"actions":[{"action_id":"x","value":"a|b|c","action_ts":"1"}]}"#,
            r#"{"type":"block_actions","user":{"id":"U9"},"actions":[{"action_id":"approve","value":"a|b","action_ts":"1"}]}"#,
            r#"{"type":"block_actions","user":{"id":"U9"},"actions":[{"action_id":"approve","value":"a||c","action_ts":"1"}]}"#,
            r#"{"type":"block_actions","user":{"id":"U9"},"actions":[{"action_id":"approve","value":"a|b|c"}]}"#,
            r#"{"type":"block_actions","user":{"id":"U9"},"response_url":7,"actions":[{"action_id":"approve","value":"a|b|c","action_ts":"1"}]}"#,
            "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
            "not json",
        ] {
            assert!(ok(bad).is_err(), "{bad}");
        }
        assert!(parse_callback(b"token=1").is_err());
        assert!(parse_callback(b"payload=%zz").is_err());
        assert!(parse_callback(b"payload=%7B%7D&payload=%7B%7D").is_err());
        assert!(parse_callback(&vec![b'a'; MAX_BODY_BYTES + 1]).is_err());
    }
}
