//! The approval interaction: what a person sees about one held or asked call, on every
//! channel (R43, seed 002).

use serde_json::{Map, Value};

use crate::call::Turn;
use crate::decl::ToolIdentity;

/// One approval interaction (R43): the id to answer, the prompt, every reason, the tool's
/// identity as the rule matched it, the model's name for the tool, and the input exactly as
/// it will be sent. The terminal prompt, the interactive stream, the inbox record and
/// `toolgate inbox show` all show this one value, built by one function.
///
/// ```
/// use serde_json::json;
/// use toolgate_core::{Interaction, ToolIdentity, Turn};
/// let i = Interaction::new("ia_1", ToolIdentity::mcp("github", "create_issue"), "github__create_issue")
///     .reasons(vec!["Issues need a person".into()])
///     .agent("support")
///     .input(json!({"title": "x"}))
///     .turn(Some(Turn::new("s1", "t1")));
/// assert_eq!(i.prompt, "Approve github / create_issue?");
/// let j = i.to_json();
/// assert_eq!(j["server"], "github");
/// assert_eq!(j["tool"], "create_issue");
/// assert_eq!(j["toolName"], "github__create_issue");
/// assert_eq!(j["session"], "s1");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Interaction {
    /// The interaction id to answer.
    pub id: String,
    /// `Approve server / tool?` for an MCP tool, `Approve tool?` otherwise
    /// ([`ToolIdentity::approval_prompt`]).
    pub prompt: String,
    /// Every reason that asked: a rule's `reason`, or a description of the rule (R17, R43).
    pub reasons: Vec<String>,
    /// The tool's identity, as the rule matched it (its own name, R41).
    pub identity: ToolIdentity,
    /// The name the model called the tool by (its qualified name, R1).
    pub model_name: String,
    /// The calling agent as rules match it: the profile, or a subagent's id (R19).
    pub agent: String,
    /// The input exactly as it will be sent.
    pub input: Value,
    /// The session and turn the call belongs to, if any.
    pub turn: Option<Turn>,
    /// The execution target (seed 000), when the tool's declaration names its
    /// fields: shown first.
    pub target: Option<crate::target::ExecutionTarget>,
    /// The labels the decision read (R49), when a rule or a quota selects by labels: the
    /// tool's, and what the call's session had already done when it was asked about ("this
    /// session has read: private, untrusted"), shown beside the reasons so a person sees why a
    /// rule on session labels matched.
    pub labels: Option<crate::decision::LabelsRead>,
}

impl Interaction {
    /// An interaction about `identity`, called `model_name` by the model; the prompt is made
    /// from the identity.
    pub fn new(
        id: impl Into<String>,
        identity: ToolIdentity,
        model_name: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            prompt: identity.approval_prompt(),
            reasons: Vec::new(),
            identity,
            model_name: model_name.into(),
            agent: String::new(),
            input: Value::Null,
            turn: None,
            target: None,
            labels: None,
        }
    }

    /// Sets the reasons.
    #[must_use]
    pub fn reasons(mut self, reasons: Vec<String>) -> Self {
        self.reasons = reasons;
        self
    }

    /// Sets the agent.
    #[must_use]
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = agent.into();
        self
    }

    /// Sets the input.
    #[must_use]
    pub fn input(mut self, input: Value) -> Self {
        self.input = input;
        self
    }

    /// Sets the session and turn.
    #[must_use]
    pub fn turn(mut self, turn: Option<Turn>) -> Self {
        self.turn = turn;
        self
    }

    /// Sets the execution target.
    #[must_use]
    pub fn target(mut self, target: Option<crate::target::ExecutionTarget>) -> Self {
        self.target = target;
        self
    }

    /// Sets the labels the decision read (R49).
    #[must_use]
    pub fn labels(mut self, labels: Option<crate::decision::LabelsRead>) -> Self {
        self.labels = labels;
        self
    }

    /// What a person reads about the labels the decision read (R49): `this session has
    /// read: private, untrusted` (the session's labels when the call was asked about), then
    /// `the tool carries: egress`; `None` when the decision read none.
    ///
    /// ```
    /// use toolgate_core::{Interaction, LabelSet, LabelsRead, ToolIdentity};
    /// let i = Interaction::new("ia_1", ToolIdentity::http("post"), "post").labels(Some(LabelsRead::new(
    ///     LabelSet::of(["egress"]),
    ///     Some(LabelSet::of(["private", "untrusted"])),
    /// )));
    /// assert_eq!(
    ///     i.labels_line().unwrap(),
    ///     "this session has read: private, untrusted; the tool carries: egress"
    /// );
    /// ```
    pub fn labels_line(&self) -> Option<String> {
        let read = self.labels.as_ref()?;
        let list = |l: &crate::LabelSet| {
            if l.is_empty() {
                String::from("nothing labelled")
            } else {
                l.join(", ")
            }
        };
        let tool = format!("the tool carries: {}", list(&read.tool));
        Some(match &read.session {
            Some(session) => format!("this session has read: {}; {tool}", list(session)),
            None => tool,
        })
    }

    /// The interaction as JSON: `id`, `prompt`, `reasons`, `kind`, `server` (MCP tools
    /// only), `tool` (the own name), `toolName` (the model's name), `agent`, `input`, and
    /// `session`/`turn` when the call has them; `target` (first) when it has one; `labels`
    /// (`{"tool": [...], "session": [...]}`, R49) when the decision read labels.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(t) = &self.target {
            m.insert("target".into(), t.to_json());
        }
        m.insert("id".into(), Value::from(self.id.clone()));
        m.insert("prompt".into(), Value::from(self.prompt.clone()));
        m.insert(
            "reasons".into(),
            Value::Array(self.reasons.iter().cloned().map(Value::from).collect()),
        );
        m.insert("kind".into(), Value::from(self.identity.kind().as_str()));
        if let Some(server) = self.identity.server() {
            m.insert("server".into(), Value::from(server));
        }
        m.insert("tool".into(), Value::from(self.identity.name()));
        m.insert("toolName".into(), Value::from(self.model_name.clone()));
        m.insert("agent".into(), Value::from(self.agent.clone()));
        m.insert("input".into(), self.input.clone());
        if let Some(t) = &self.turn {
            m.insert("session".into(), Value::from(t.session.clone()));
            m.insert("turn".into(), Value::from(t.turn.clone()));
        }
        if let Some(l) = &self.labels {
            let mut o = Map::new();
            o.insert("tool".into(), Value::from(&l.tool));
            if let Some(session) = &l.session {
                o.insert("session".into(), Value::from(session));
            }
            m.insert("labels".into(), Value::Object(o));
        }
        Value::Object(m)
    }

    /// The interaction as text a person reads: the prompt, then the id, the model's name,
    /// the agent, the session and turn, every reason and the full input. Every value is
    /// shown with its hidden characters marked ([`crate::display::visible`]): a
    /// right-to-left override or a zero-width space in the input or a name never makes the
    /// person read another value than the one sent.
    ///
    /// ```
    /// use toolgate_core::{Interaction, ToolIdentity};
    /// let i = Interaction::new("ia_1", ToolIdentity::http("pay"), "pay")
    ///     .input(serde_json::json!({"to": "bob\u{202E}"}));
    /// assert!(i.render().contains("\"to\": \"bob⟦U+202E⟧\""));
    /// ```
    pub fn render(&self) -> String {
        use crate::display::{visible, visible_json};
        let input = visible_json(&self.input);
        // The execution target comes first (seed 000): where the call would run.
        let mut s = self
            .target
            .as_ref()
            .map(|t| format!("Runs on: {}\n", t.describe()))
            .unwrap_or_default();
        s += &format!(
            "{}\n  interaction: {}\n  as: `{}`\n  agent: {}\n",
            visible(&self.prompt),
            visible(&self.id),
            visible(&self.model_name),
            visible(&self.agent)
        );
        if let Some(t) = &self.turn {
            s.push_str(&format!(
                "  session: {}  turn: {}\n",
                visible(&t.session),
                visible(&t.turn)
            ));
        }
        s.push_str("  because:\n");
        for r in &self.reasons {
            s.push_str("    - ");
            s.push_str(&visible(r));
            s.push('\n');
        }
        // R49: what the session had already done when the call was asked about.
        if let Some(line) = self.labels_line() {
            s.push_str("  labels: ");
            s.push_str(&line);
            s.push('\n');
        }
        s.push_str("  input:\n");
        for line in input.lines() {
            s.push_str("    ");
            s.push_str(line);
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn r43_prompt_names_the_own_name_and_the_server_for_mcp_only() {
        let mcp = Interaction::new(
            "ia",
            ToolIdentity::mcp("github", "create_issue"),
            "github__create_issue",
        );
        assert_eq!(mcp.prompt, "Approve github / create_issue?");
        let http = Interaction::new("ia", ToolIdentity::http("refund"), "refund");
        assert_eq!(http.prompt, "Approve refund?");
        assert!(http.to_json().get("server").is_none());
        let local = Interaction::new(
            "ia",
            ToolIdentity::toolset("coding", "write"),
            "coding__write",
        );
        assert_eq!(local.prompt, "Approve write?");
    }

    #[test]
    fn r43_render_shows_every_field() {
        let i = Interaction::new("ia_9", ToolIdentity::mcp("gh", "close"), "gh__close")
            .reasons(vec!["one".into(), "two".into()])
            .agent("sub-1")
            .input(json!({"n": 1}))
            .turn(Some(Turn::new("s", "t")));
        let text = i.render();
        for part in [
            "Approve gh / close?",
            "ia_9",
            "`gh__close`",
            "sub-1",
            "- one",
            "- two",
            "\"n\": 1",
            "session: s",
            "turn: t",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }

    #[test]
    fn issue20_render_marks_hidden_characters_in_every_value() {
        let i = Interaction::new(
            "ia\u{200B}1",
            ToolIdentity::mcp("gh\u{202E}", "clo\u{2066}se"),
            "gh\u{202E}__clo\u{2066}se",
        )
        .reasons(vec!["why\u{FEFF}\nfake: line".into()])
        .agent("sup\u{200D}port")
        .input(json!({"to\u{202D}": "alice\u{E0041}", "amount": "100\u{202E}0"}))
        .turn(Some(Turn::new("s\u{2060}", "t\u{061C}")));
        let text = i.render();
        for hidden in [
            '\u{200B}',
            '\u{202E}',
            '\u{2066}',
            '\u{FEFF}',
            '\u{200D}',
            '\u{202D}',
            '\u{E0041}',
            '\u{2060}',
            '\u{061C}',
        ] {
            assert!(
                !text.contains(hidden),
                "U+{:04X} shown raw in {text}",
                u32::from(hidden)
            );
        }
        for part in [
            "Approve gh⟦U+202E⟧ / clo⟦U+2066⟧se?",
            "interaction: ia⟦U+200B⟧1",
            "`gh⟦U+202E⟧__clo⟦U+2066⟧se`",
            "agent: sup⟦U+200D⟧port",
            "- why⟦U+FEFF⟧⟦U+000A⟧fake: line",
            "\"to⟦U+202D⟧\": \"alice⟦U+E0041⟧\"",
            "\"amount\": \"100⟦U+202E⟧0\"",
            "session: s⟦U+2060⟧  turn: t⟦U+061C⟧",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }
}
