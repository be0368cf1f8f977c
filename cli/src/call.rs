//! The CALL file (SPEC §7, §8). Any call that does not fit the schema is an error (exit 2):
//! unknown fields, `null`, wrong types, duplicate keys, enum values not spelled exactly, a
//! tool named both ways inconsistently. The input stays raw text so that its depth is
//! measured before any value is built (R36).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use toolgate_core::{AgentRef, RunContext, RunMode, ToolIdentity, ToolRef, names};
use toolgate_engine::simulate::Answer;

/// A parsed call.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) tool: ToolRef,
    pub(crate) agent: AgentRef,
    pub(crate) input: String,
    pub(crate) run: RunContext,
    /// The session the call belongs to (R43), for quotas `per: ["session"]` and grants.
    pub(crate) session: Option<String>,
    /// When the call is made, milliseconds since the Unix epoch.
    pub(crate) at: Option<u64>,
    /// The person's answer should the call be asked (only in `simulate`'s CALLS).
    pub(crate) answer: Option<Answer>,
}

/// A JSON object whose values stay raw, duplicate keys refused.
struct RawObject(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut out: Vec<(String, Box<RawValue>)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
                    }
                    let v: Box<RawValue> = map.next_value()?;
                    out.push((key, v));
                }
                Ok(RawObject(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl RawObject {
    fn parse(text: &str, what: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("{what}: {e}"))
    }

    fn check_fields(&self, known: &[&str], what: &str) -> Result<(), String> {
        for (k, _) in &self.0 {
            if !known.contains(&k.as_str()) {
                return Err(format!("{what}: unknown field `{k}`"));
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
                Ok(serde_json::Value::String(s)) => Ok(Some(s)),
                _ => Err(format!("`{key}` must be a string")),
            },
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(raw) => match raw.get().trim() {
                "true" => Ok(Some(true)),
                "false" => Ok(Some(false)),
                _ => Err(format!("`{key}` must be true or false")),
            },
        }
    }
}

const CALL_FIELDS: &[&str] = &[
    "agent", "profile", "name", "toolset", "server", "kind", "tool", "input", "run", "session",
    "at",
];
const SIMULATED_CALL_FIELDS: &[&str] = &[
    "agent", "profile", "name", "toolset", "server", "kind", "tool", "input", "run", "session",
    "at", "answer",
];

/// A CALL file (`decide`, `explain`): no `answer`.
pub(crate) fn parse(text: &str) -> Result<Call, String> {
    parse_fields(text, CALL_FIELDS)
}

/// One of `simulate`'s CALLS: `at` required, `answer` allowed.
pub(crate) fn parse_simulated(text: &str) -> Result<Call, String> {
    let call = parse_fields(text, SIMULATED_CALL_FIELDS)?;
    if call.at.is_none() {
        return Err(String::from("a simulated call needs `at`"));
    }
    Ok(call)
}

/// `simulate`'s CALLS: a JSON list of calls, each kept raw for [`parse_simulated`].
pub(crate) fn split_list(text: &str) -> Result<Vec<Box<RawValue>>, String> {
    serde_json::from_str::<Vec<Box<RawValue>>>(text)
        .map_err(|e| format!("CALLS must be a JSON list of calls: {e}"))
}

fn parse_fields(text: &str, fields: &[&str]) -> Result<Call, String> {
    let obj = RawObject::parse(text, "the call must be a JSON object")?;
    obj.check_fields(fields, "call")?;
    let agent = obj
        .string("agent")?
        .ok_or_else(|| String::from("`agent` is required"))?;
    let agent = match obj.string("profile")? {
        Some(profile) => AgentRef::subagent(profile, agent),
        None => AgentRef::profile(agent),
    };
    let tool = tool_of(&obj)?;
    let input = input_of(&obj)?;
    let run = run_of(&obj)?;
    let session = obj.string("session")?;
    if session.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return Err(String::from("`session` must not be blank"));
    }
    let at = match obj.get("at") {
        None => None,
        Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(serde_json::Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
            _ => {
                return Err(String::from(
                    "`at` must be a whole number of milliseconds since the Unix epoch, at least 0",
                ));
            }
        },
    };
    let answer = match obj.string("answer")? {
        None => None,
        Some(a) => Some(
            Answer::parse(&a)
                .ok_or_else(|| format!("unknown `answer` `{a}`; expected `approve` or `deny`"))?,
        ),
    };
    Ok(Call {
        tool,
        agent,
        input,
        run,
        session,
        at,
        answer,
    })
}

/// The call's tool: by `name`, by identity (`tool` with `toolset`, `server` or `"kind":
/// "http"`), or both when they name the same tool (R1, R2).
fn tool_of(obj: &RawObject) -> Result<ToolRef, String> {
    let name = obj.string("name")?;
    let tool = obj.string("tool")?;
    let toolset = obj.string("toolset")?;
    let server = obj.string("server")?;
    let kind = obj.string("kind")?;
    let identity = match (toolset, server, kind.as_deref(), tool) {
        (None, None, None, None) => None,
        (Some(t), None, None | Some("local"), Some(tool)) => Some(ToolIdentity::toolset(t, tool)),
        (None, Some(s), None | Some("mcp"), Some(tool)) => Some(ToolIdentity::mcp(s, tool)),
        (None, None, Some("http"), Some(tool)) => Some(ToolIdentity::http(tool)),
        (_, _, Some(k), _) if !matches!(k, "http" | "mcp" | "local") => {
            return Err(format!(
                "unknown `kind` `{k}`; expected `http`, `mcp` or `local`"
            ));
        }
        (_, _, _, None) => {
            return Err(String::from(
                "a call naming its tool by identity needs `tool` (with `toolset`, `server` or `\"kind\": \"http\"`)",
            ));
        }
        _ => {
            return Err(String::from(
                "a call names its tool's identity with exactly one of `toolset`, `server` or `\"kind\": \"http\"`, plus `tool`",
            ));
        }
    };
    let tool = match (name, identity) {
        (Some(n), None) => ToolRef::Name(n),
        (None, Some(id)) => ToolRef::Identity(id),
        (Some(n), Some(id)) => {
            let same = id
                .qualified_name()
                .is_ok_and(|q| names::names_equal(&q, &n));
            if !same {
                return Err(format!(
                    "the call names its tool both as `{n}` and as {id}, which are not the same tool"
                ));
            }
            ToolRef::Both {
                name: n,
                identity: id,
            }
        }
        (None, None) => {
            return Err(String::from(
                "the call names no tool: give `name` or an identity",
            ));
        }
    };
    Ok(tool)
}

/// The call's `input`, as written (an object; every number a finite double, SPEC §8).
fn input_of(obj: &RawObject) -> Result<String, String> {
    Ok(match obj.get("input") {
        None => String::from("{}"),
        Some(raw) => {
            let t = raw.get().trim_start();
            if !t.starts_with('{') {
                return Err(String::from("`input` must be a JSON object"));
            }
            if let Some(n) = non_finite_number(raw.get()) {
                return Err(format!(
                    "`input` holds the number `{n}`, which is not a finite double (SPEC §8)"
                ));
            }
            raw.get().to_owned()
        }
    })
}

/// The call's `run` settings (mode and background, R25).
fn run_of(obj: &RawObject) -> Result<RunContext, String> {
    let mut run = RunContext::default();
    if let Some(raw) = obj.get("run") {
        let r = RawObject::parse(raw.get(), "`run` must be an object")?;
        r.check_fields(&["mode", "background"], "run")?;
        if let Some(mode) = r.string("mode")? {
            run.mode = RunMode::parse(&mode).ok_or_else(|| {
                format!(
                    "unknown run mode `{mode}`; expected `use_agent_policy`, `auto_approve_required` or `auto_reject_required`"
                )
            })?;
        }
        if let Some(b) = r.boolean("background")? {
            run.background = b;
        }
    }
    Ok(run)
}

/// The first number literal in JSON text that is not a finite double (`1e400`), if any.
/// Walks the text once without building values, so any depth is fine (SPEC §8, R36).
fn non_finite_number(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while let Some(&b) = bytes.get(i) {
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'-' | b'0'..=b'9' => {
                let start = i;
                while bytes
                    .get(i)
                    .is_some_and(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                {
                    i += 1;
                }
                let literal = text.get(start..i)?;
                if literal.parse::<f64>().is_ok_and(|v| !v.is_finite()) {
                    return Some(literal);
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_spec_example() {
        let c = parse(r#"{ "agent": "support", "server": "github", "tool": "create_issue", "input": { "title": "x" },
            "run": { "mode": "use_agent_policy", "background": false } }"#)
        .unwrap();
        assert!(matches!(c.tool, ToolRef::Identity(_)));
        assert_eq!(c.input, r#"{ "title": "x" }"#);
    }

    #[test]
    fn rejects_what_does_not_fit() {
        for bad in [
            r#"{"name": "x"}"#,
            r#"{"agent": "a"}"#,
            r#"{"agent": "a", "name": "x", "colour": 1}"#,
            r#"{"agent": "a", "name": "x", "run": {"mode": "Use_Agent_Policy"}}"#,
            r#"{"agent": "a", "name": "x", "run": {"background": "yes"}}"#,
            r#"{"agent": "a", "name": "x", "input": [1]}"#,
            r#"{"agent": "a", "name": "x", "input": null}"#,
            r#"{"agent": null, "name": "x"}"#,
            r#"{"agent": "a", "name": "github__a", "server": "github", "tool": "b"}"#,
            r#"{"agent": "a", "server": "github"}"#,
            r#"{"agent": "a", "toolset": "t", "server": "s", "tool": "x"}"#,
            r#"{"agent": "a", "kind": "ftp", "tool": "x"}"#,
            r#"{"agent": "a", "name": "x", "name": "y"}"#,
            r#"[]"#,
            r#"{"agent": "a", "name": "x", "session": " "}"#,
            r#"{"agent": "a", "name": "x", "session": 1}"#,
            r#"{"agent": "a", "name": "x", "at": -1}"#,
            r#"{"agent": "a", "name": "x", "at": 1.5}"#,
            r#"{"agent": "a", "name": "x", "at": "0"}"#,
            r#"{"agent": "a", "name": "x", "answer": "approve"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn section_7_session_at_and_answer() {
        let c = parse(r#"{"agent": "a", "name": "x", "session": "s-1", "at": 5}"#).unwrap();
        assert_eq!((c.session.as_deref(), c.at), (Some("s-1"), Some(5)));
        let c =
            parse_simulated(r#"{"agent": "a", "name": "x", "at": 0, "answer": "deny"}"#).unwrap();
        assert_eq!(c.answer, Some(Answer::Deny));
        for bad in [
            r#"{"agent": "a", "name": "x"}"#,
            r#"{"agent": "a", "name": "x", "at": 0, "answer": "maybe"}"#,
        ] {
            assert!(parse_simulated(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn non_finite_numbers_exit_2() {
        for bad in [
            r#"{"agent": "a", "name": "x", "input": {"n": 1e400}}"#,
            r#"{"agent": "a", "name": "x", "input": {"n": [-1E+999]}}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("not a finite double"), "{e}");
        }
        let ok = parse(
            r#"{"agent": "a", "name": "x", "input": {"s": "1e400", "n": 1e300, "z": -0.5e-400}}"#,
        );
        assert!(ok.is_ok(), "strings and finite numbers are fine: {ok:?}");
    }

    #[test]
    fn both_ways_consistent_is_fine() {
        let c = parse(r#"{"agent": "a", "name": "GITHUB__create_issue", "server": "github", "tool": "create_issue"}"#)
            .unwrap();
        assert!(matches!(c.tool, ToolRef::Both { .. }));
    }

    #[test]
    fn deep_input_stays_raw() {
        let deep = format!(
            r#"{{"agent": "a", "name": "x", "input": {{"a": {}{}}}}}"#,
            "[".repeat(5000),
            "]".repeat(5000)
        );
        let c = parse(&deep).unwrap();
        assert!(c.input.len() > 10_000);
    }
}
