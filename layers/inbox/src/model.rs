//! The records an inbox keeps: held calls, their states, answers, claims and results.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use toolgate_core::approval::ApprovalRequest;
use toolgate_core::{AgentRef, Ask, Interaction, Principal, RunContext, ToolIdentity, Turn};
use toolgate_engine::canon;

use crate::codec::RecordError;

mod answer;
pub use answer::{
    Answer, AnswerBinding, AnswerReceipt, GivenApproval, InvalidAnswer, MAX_APPROVALS,
    MAX_REASON_CHARS, TurnState,
};

/// A point in time, in whole milliseconds since the Unix epoch: what the store keeps.
///
/// ```
/// use toolgate_inbox::Timestamp;
/// let t = Timestamp::from_millis(1_700_000_000_123);
/// assert_eq!(t.to_string(), "2023-11-14T22:13:20.123Z");
/// assert!(Timestamp::now() > t);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// Now, by the system clock.
    pub fn now() -> Self {
        Self::from(SystemTime::now())
    }

    /// A timestamp from milliseconds since the Unix epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// This time plus `d` (saturating).
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(ms))
    }

    /// This time minus `d` (saturating).
    #[must_use]
    pub fn saturating_sub(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_sub(ms))
    }

    /// How long before `now` this time was (zero when it is not in the past).
    pub fn age(self, now: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(now.0.saturating_sub(self.0)).unwrap_or(0))
    }

    /// As a `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        match u64::try_from(self.0) {
            Ok(ms) => UNIX_EPOCH + Duration::from_millis(ms),
            Err(_) => UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs()),
        }
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Self(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Self(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            humantime::format_rfc3339_millis(self.to_system_time())
        )
    }
}

/// Where a held call is in its life (R26).
///
/// ```text
/// pending ──► approved ──► claimed ──► done
///    │                        │  └───► failed
///    ├──► denied              └──────► unknown   (the process died after the claim)
///    ├──► expired
///    └──► cancelled
/// ```
///
/// Every transition is a conditional update (`… WHERE state = <from>`), so two answers or
/// two senders racing for one call have exactly one winner. Nothing leaves `denied`,
/// `expired`, `cancelled`, `done`, `failed` or `unknown`; an `unknown` call is never sent
/// again automatically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Held; nobody has answered.
    Pending,
    /// A person approved; not yet sent.
    Approved,
    /// A person denied.
    Denied,
    /// Nobody answered before the call's expiry (not a person's denial).
    Expired,
    /// The wait was cancelled before anyone answered.
    Cancelled,
    /// Claimed for sending: committed before the tool is invoked.
    Claimed,
    /// Sent; the tool's response is recorded.
    Done,
    /// Sent (or refused at the last moment, or the stack failed); the failure is recorded.
    Failed,
    /// Claimed by a process that died before recording the result: it may or may not have
    /// reached the tool. Never sent again automatically.
    Unknown,
}

impl State {
    /// Every state.
    pub const ALL: [State; 9] = [
        State::Pending,
        State::Approved,
        State::Denied,
        State::Expired,
        State::Cancelled,
        State::Claimed,
        State::Done,
        State::Failed,
        State::Unknown,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Denied => "denied",
            State::Expired => "expired",
            State::Cancelled => "cancelled",
            State::Claimed => "claimed",
            State::Done => "done",
            State::Failed => "failed",
            State::Unknown => "unknown",
        }
    }

    /// Parses the stored spelling exactly.
    pub fn parse(s: &str) -> Option<Self> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether nothing can leave this state.
    pub fn is_final(self) -> bool {
        !matches!(self, State::Pending | State::Approved | State::Claimed)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call to hold, exactly as the gate decided it. Build it from the gate's request with
/// [`NewHeldCall::from_request`].
#[derive(Debug, Clone, PartialEq)]
pub struct NewHeldCall {
    /// The gate-issued, unguessable interaction id (the record's primary key).
    pub interaction_id: String,
    /// The call's id, kept so the resumed call carries the same one.
    pub call_id: String,
    /// The tool's qualified (wire) name.
    pub tool: String,
    /// The identities behind that name, as the sources spelled them.
    pub identities: Vec<ToolIdentity>,
    /// The hash of the tool's definition the person is asked about (R35).
    pub definition_hash: String,
    /// The calling agent (profile and subagent).
    pub agent: AgentRef,
    /// The input exactly as it will be sent: the compact serialisation of the call's JSON
    /// value (numbers keep their exact spelling, unlike RFC 8785 which rounds through
    /// doubles).
    pub input_json: String,
    /// The RFC 8785 canonical form of the input (what the hash is taken over).
    pub input_canonical: String,
    /// `sha256:` of the canonical input (R35).
    pub input_hash: String,
    /// Every reason that asked, with who asked (R17).
    pub reasons: Vec<Ask>,
    /// The run's settings.
    pub run: RunContext,
    /// The session and turn the call was held in (R43): a subagent's call carries its
    /// parent's, unless the subagent runs in a session of its own.
    pub turn: Option<Turn>,
    /// When the call was held.
    pub created_at: Timestamp,
    /// When an unanswered call expires.
    pub expires_at: Timestamp,
    /// The execution target the gate captured (seed 000), shown first; `None` when the
    /// tool's declaration names none (or the store keeps none).
    pub target: Option<toolgate_core::ExecutionTarget>,
    /// How many distinct people must approve the call before it is sent (R51), from 1 to
    /// [`MAX_APPROVALS`]: the gate's decision, kept with the call.
    pub approvals: u8,
    /// The labels the decision read when the call was asked about (R49): the tool's, and
    /// what its session had already done — shown to the person; `None` when no rule or
    /// quota read labels.
    pub labels: Option<toolgate_core::LabelsRead>,
}

/// Why the gate's request cannot be held ([`NewHeldCall::from_request`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HoldError {
    /// More approvals than an inbox gathers ([`MAX_APPROVALS`]).
    #[error(
        "the call needs {approvals} approvals from distinct people, and an inbox gathers at most {MAX_APPROVALS}"
    )]
    TooManyApprovals {
        /// How many the call needs.
        approvals: u8,
    },
    /// The input has no canonical form (RFC 8785).
    #[error("the input cannot be canonicalised")]
    NotCanonicalisable,
    /// The input's hash is not the request's.
    #[error("the input's hash is not the one the gate computed")]
    HashMismatch,
    /// The input cannot be written as JSON text.
    #[error("the input cannot be serialised: {0}")]
    NotSerialisable(serde_json::Error),
}

impl NewHeldCall {
    /// The record of the gate's `request`, held at `now` until `now + ttl`. Fails (with a
    /// reason) when the input cannot be canonicalised or its hash is not the request's.
    pub fn from_request(
        request: &ApprovalRequest,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Self, HoldError> {
        if request.approvals > MAX_APPROVALS {
            return Err(HoldError::TooManyApprovals {
                approvals: request.approvals,
            });
        }
        let input_canonical =
            canon::canonical_json(&request.input).ok_or(HoldError::NotCanonicalisable)?;
        let input_hash = canon::sha256_hex(input_canonical.as_bytes());
        if input_hash != request.input_hash {
            return Err(HoldError::HashMismatch);
        }
        // An integer past 64 bits keeps its digits (R20): the text is what a person is shown
        // and what a repeat is compared with.
        let input_json = if request.literals.is_empty() {
            serde_json::to_string(&*request.input).map_err(HoldError::NotSerialisable)?
        } else {
            toolgate_core::number::to_text(&request.input, &request.literals)
        };
        Ok(Self {
            interaction_id: request.interaction_id.clone(),
            call_id: request.call_id.as_str().to_owned(),
            tool: request.tool.clone(),
            identities: request.identities.clone(),
            definition_hash: request.definition_hash.clone(),
            agent: request.agent.clone(),
            input_json,
            input_canonical,
            input_hash,
            reasons: request.asks.clone(),
            run: request.run,
            turn: request.turn.clone(),
            created_at: now,
            expires_at: now.saturating_add(ttl),
            target: request.target.clone(),
            approvals: request.approvals.max(1),
            labels: request.labels.clone(),
        })
    }
}

/// What [`HeldCalls::hold_unless_repeated`](crate::HeldCalls::hold_unless_repeated) did
/// with a call (R26).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Holding {
    /// The call was held anew, `pending`.
    Held,
    /// The same call is already held and open (`pending`, `approved`) or being sent
    /// (`claimed`): nothing new was held.
    Open(HeldRecord),
    /// The same call's last ask ended (`denied`, `expired`, `cancelled`, `done`, `failed`,
    /// `unknown`), and this repeat is the one told so; nothing was held.
    Ended(HeldRecord),
}

/// One held call as the store keeps it: the call as decided, and where it is now.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldRecord {
    /// The call exactly as it was held.
    pub call: NewHeldCall,
    /// Its state.
    pub state: State,
    /// Who answered (approved or denied).
    pub approver: Option<String>,
    /// The answering person's verified principal (`sub`, `iss`), when they answered with an
    /// identity-provider token (R47); `None` for a static-token, header or command-line
    /// approver, and for answers recorded before the store kept it.
    pub approver_principal: Option<Principal>,
    /// The approvals given so far to a call that needs more than one (R51), in the order
    /// given, one per person; empty for a call that needs one (its approval is
    /// [`HeldRecord::approver`]'s). When the last one needed is given the call is
    /// `approved`, and `approver` names whoever gave it.
    pub approvals: Vec<GivenApproval>,
    /// The idempotency key of the answer.
    pub answer_key: Option<String>,
    /// The reason given with a denial.
    pub answer_reason: Option<String>,
    /// When it was answered.
    pub answered_at: Option<Timestamp>,
    /// Which store instance claimed it for sending.
    pub claimed_by: Option<String>,
    /// When it was claimed.
    pub claimed_at: Option<Timestamp>,
    /// The recorded response (`done`/`failed`).
    pub result: Option<Value>,
    /// When the response was recorded.
    pub finished_at: Option<Timestamp>,
    /// The last change.
    pub updated_at: Timestamp,
    /// The input the agent sent, exactly as written, when a person approved the call with an
    /// edited input ([`call`](HeldRecord::call) then holds the edited one, the input that is
    /// sent); `None` for a call approved as held. A repeat of the agent's call is a repeat
    /// of this one (R26): it is answered by the edited call, never held anew.
    pub edited_from: Option<String>,
}

impl HeldRecord {
    /// The interaction id.
    pub fn id(&self) -> &str {
        &self.call.interaction_id
    }

    /// The input exactly as held (a number past 64 bits is the nearest double here: its
    /// digits are in [`HeldRecord::literals`]).
    pub fn input(&self) -> Result<Value, RecordError> {
        crate::codec::parse_json(&self.call.input_json)
    }

    /// The input's numbers as written where [`HeldRecord::input`] does not reproduce them
    /// (R20): put them in a call's extensions and it decides, and is compared, as held.
    pub fn literals(&self) -> toolgate_core::number::NumberLiterals {
        toolgate_core::number::NumberLiterals::scan(&self.call.input_json)
    }

    /// The input pretty-printed for a person with every number as written (R20), or why
    /// it cannot be read.
    pub fn input_pretty(&self) -> Result<String, RecordError> {
        pretty(&self.call.input_json)
    }

    /// [`HeldRecord::edited_from`] pretty-printed as [`HeldRecord::input_pretty`] does, when
    /// the call was approved with an edited input.
    pub fn edited_from_pretty(&self) -> Option<Result<String, RecordError>> {
        self.edited_from.as_deref().map(pretty)
    }

    /// Whether this record holds exactly `input` with `literals` (R35): the same value,
    /// every number the same as written, so two inputs that share a canonical hash or round
    /// to one double are two calls.
    pub fn holds_input(
        &self,
        input: &Value,
        literals: &toolgate_core::number::NumberLiterals,
    ) -> bool {
        text_holds(&self.call.input_json, input, literals)
    }

    /// Whether a call with `input` (its numbers as written in `literals`) repeats this one
    /// (R26): its input is exactly the held one, or, when a person approved the call with an
    /// edited input, exactly the input the agent sent ([`HeldRecord::edited_from`]).
    pub fn repeated_by(
        &self,
        input: &Value,
        literals: &toolgate_core::number::NumberLiterals,
    ) -> bool {
        self.holds_input(input, literals)
            || self
                .edited_from
                .as_deref()
                .is_some_and(|sent| text_holds(sent, input, literals))
    }

    /// The approval interaction a person sees about this call (R43), the same one every
    /// channel shows: the id, the prompt naming the tool's own name, every reason, the
    /// identity as the rule matched it, the model's name for the tool, the agent (a
    /// subagent's id for a subagent's call) and the input exactly as it will be sent.
    pub fn interaction(&self) -> Interaction {
        let identity = self
            .call
            .identities
            .first()
            .cloned()
            .unwrap_or_else(|| ToolIdentity::http(self.call.tool.clone()));
        let input = self
            .input()
            .unwrap_or_else(|_| Value::from(self.call.input_json.clone()));
        Interaction::new(
            self.call.interaction_id.clone(),
            identity,
            self.call.tool.clone(),
        )
        .reasons(self.call.reasons.iter().map(|a| a.reason.clone()).collect())
        .agent(self.call.agent.rule_name())
        .input(input)
        .turn(self.call.turn.clone())
        .target(self.call.target.clone())
        .labels(self.call.labels.clone())
    }

    /// Whether an unanswered call is past its expiry at `now`.
    pub fn is_past_expiry(&self, now: Timestamp) -> bool {
        now >= self.call.expires_at
    }

    /// How many distinct people must approve the call (R51): 1 for most calls.
    pub fn approvals_needed(&self) -> u8 {
        self.call.approvals.max(1)
    }

    /// The approvals that count toward [`HeldRecord::approvals_needed`] (R51): those given
    /// for the input and definition the call holds now (R35), one per person.
    pub fn counted_approvals(&self) -> Vec<&GivenApproval> {
        self.approvals
            .iter()
            .filter(|a| {
                a.input_hash == self.call.input_hash
                    && a.definition_hash == self.call.definition_hash
            })
            .collect()
    }

    /// Whether the approvals the call needs were all given: always for a call that needs
    /// one and is approved (its one approval is the state), otherwise when as many distinct
    /// people approved as it needs (R51). A call marked `approved` without them (by a
    /// program that did not gather them) is never sent.
    pub fn has_every_approval(&self) -> bool {
        self.approvals_needed() <= 1
            || self.counted_approvals().len() >= usize::from(self.approvals_needed())
    }

    /// The names of those who approved a call that needs several approvals, in the order
    /// given, joined for a sentence (`alice`, `alice and bob`, `alice, bob and carol`); for a
    /// call that needs one, its approver.
    pub fn approved_by(&self) -> String {
        if self.approvals_needed() <= 1 {
            return self.approver.clone().unwrap_or_default();
        }
        join_names(self.counted_approvals().iter().map(|a| a.approver.as_str()))
    }

    /// What a person is told about a call that needs several approvals (R51), as every
    /// surface shows it: `"1 of 2 approvals: alice"`, `"0 of 3 approvals"`. `None` for a
    /// call that needs one. The names are as recorded: a surface marks hidden characters
    /// and escapes them as it shows any value.
    pub fn approvals_line(&self) -> Option<String> {
        let needed = self.approvals_needed();
        if needed <= 1 {
            return None;
        }
        let counted = self.counted_approvals();
        let mut line = format!("{} of {needed} approvals", counted.len());
        if !counted.is_empty() {
            line.push_str(": ");
            line.push_str(
                &counted
                    .iter()
                    .map(|a| a.approver.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        Some(line)
    }

    /// How many more people must approve a pending call before it is approved (R51): 0 for
    /// a call that needs one, and once every approval is given.
    pub fn approvals_missing(&self) -> u8 {
        let counted = u8::try_from(self.counted_approvals().len()).unwrap_or(u8::MAX);
        if self.approvals_needed() <= 1 {
            0
        } else {
            self.approvals_needed().saturating_sub(counted)
        }
    }

    /// Whether the person answering with `answer`'s name or principal already approved
    /// this call (R51: one person's approvals count once).
    pub fn approved_already_by(&self, approver: &str, principal: Option<&Principal>) -> bool {
        self.counted_approvals()
            .iter()
            .any(|a| a.is_person(approver, principal))
    }
}

/// What a call that still needs `missing` approvals waits for (R51): `it waits for one more
/// person`, `it waits for 2 more people`.
///
/// ```
/// assert_eq!(toolgate_inbox::waits_for(1), "it waits for one more person");
/// assert_eq!(toolgate_inbox::waits_for(3), "it waits for 3 more people");
/// ```
pub fn waits_for(missing: u8) -> String {
    match missing {
        1 => String::from("it waits for one more person"),
        n => format!("it waits for {n} more people"),
    }
}

/// `a`, `a and b`, `a, b and c`.
pub(crate) fn join_names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// A claim for sending an approved call: the hashes it will be sent with (R35) and a token
/// only the claimer knows, which it must show to record the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The hash of the input about to be sent.
    pub input_hash: String,
    /// The hash of the tool's definition now.
    pub definition_hash: String,
    /// The claimer's secret.
    pub token: String,
}

/// A won claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Who approved the call.
    pub approver: String,
    /// Their verified principal, when the approval was given with one (R47).
    pub approver_principal: Option<Principal>,
}

/// How a claimed call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool returned a result → `done`.
    Done,
    /// The tool failed, the stack refused after the claim, or the stack errored → `failed`.
    Failed,
}

/// The result to record for a claimed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// `done` or `failed`.
    pub outcome: Outcome,
    /// The response, as JSON (see [`crate::response_json`]).
    pub result: Value,
    /// The claim's token.
    pub token: String,
}

/// The stored tenant policy, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPolicy {
    /// The policy document without `updatedAt`, as stored (it may be unreadable).
    pub body: String,
    /// When it was stored: RFC 3339 with microseconds, strictly increasing per store.
    pub updated_at: String,
}

impl StoredPolicy {
    /// The document `policy get` prints and `policy put` takes back: the stored body with
    /// `updatedAt`. Fails with a reason when the body is not a JSON object.
    pub fn document(&self) -> Result<Value, RecordError> {
        let value = crate::codec::parse_json(&self.body)?;
        let Value::Object(mut map) = value else {
            return Err(RecordError::PolicyNotObject);
        };
        map.insert("updatedAt".into(), Value::from(self.updated_at.clone()));
        Ok(Value::Object(map))
    }

    /// [`StoredPolicy::document`] as compact JSON text with every number as written (an
    /// integer past 64 bits keeps its digits, R20), or `None` when no number needs that and
    /// the value says it all.
    pub fn document_literals(&self) -> Result<Option<String>, RecordError> {
        let literals = toolgate_core::number::NumberLiterals::scan(&self.body);
        if literals.is_empty() {
            return Ok(None);
        }
        let doc = self.document()?;
        Ok(Some(toolgate_core::number::to_text(&doc, &literals)))
    }
}

/// What a paused agent fetches about its held call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The call's state.
    pub state: State,
    /// The recorded response, once `done` or `failed`.
    pub result: Option<Value>,
    /// When it was recorded.
    pub finished_at: Option<Timestamp>,
}

/// The stored input text `stored` pretty-printed for a person with every number as written
/// (R20), or why it cannot be read.
fn pretty(stored: &str) -> Result<String, RecordError> {
    let value = crate::codec::parse_json(stored)?;
    Ok(toolgate_core::number::to_pretty_text(
        &value,
        &toolgate_core::number::NumberLiterals::scan(stored),
    ))
}

/// Whether the stored input text `stored` is exactly `input` (its numbers as written in
/// `literals`): the same JSON value with every number as written (R20, R35).
fn text_holds(
    stored: &str,
    input: &Value,
    literals: &toolgate_core::number::NumberLiterals,
) -> bool {
    match crate::codec::parse_json(stored) {
        Ok(v) => toolgate_core::number::same_input(
            &v,
            &toolgate_core::number::NumberLiterals::scan(stored),
            input,
            literals,
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
