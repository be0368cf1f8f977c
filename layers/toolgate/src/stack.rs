//! The composite: one layer that assembles the whole governed stack in the only safe order
//! (R14, R33) and applies every section of the configuration.
//!
//! Layer order is a security property, so most users should not stack the parts by hand.
//! [`ToolgateLayer`] builds the order [the layers guide](crate::guide::layers) gives, from
//! the tool span outermost to output scrubbing right outside the tool.
//!
//! What the configuration says is applied when the layer is built:
//!
//! | section | becomes |
//! |---|---|
//! | `redaction` | **one** [`Redactor`], used by audit, spans (via `toolgate-otel`) and scrubbing |
//! | `redaction.scrub_output` | the scrub layer (8) |
//! | `audit` | the audit layer (2): `file` opened as a hash-chained [`JsonlFileSink`], its flush policy, failure mode and content fields |
//! | `approval.channel`, `agents[i].approval` | checked against the channels given in code: a kind routed to with no channel of that kind is a build error at `approval.channel` (or `agents[i].approval.channel`), and so is a channel nobody routes to; each agent's asks go to the channel of its kind, waiting at most its `timeout_secs` |
//! | `agents[i].audit` | that agent's records carry the input/output as it says |
//!
//! The audit and redaction sections are read from the snapshot current when the layer is
//! built; a snapshot stored later (a reload) changes decisions, not the sink or the
//! redactor.
//!
//! The first layer that decides a call (audit, or exposure without audit) pins the one
//! decision; the filters and the gate read it (decide once, see [`crate::PinnedDecision`]).
//!
//! The parts stay public ([`ExposureLayer`], [`AuditLayer`], …) for
//! people who compose by hand; each is safe alone. A hand-built stack in the order above
//! decides every call as the composite does (the `tests` crate checks it on random
//! configurations).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::audit::MemorySink;
//! use toolgate::core::{AgentRef, RefusalCode, ToolCall, ToolOutput, ToolResponse};
//! use toolgate::engine::config::{load_str, Format};
//!
//! let handle = GovernanceHandle::new(load_str(r#"{
//!     "redaction": {"keys": ["ssn"], "scrub_output": true},
//!     "tools": [{"kind": "http", "name": "lookup"}, {"kind": "http", "name": "wipe"}],
//!     "agents": [{"name": "dev", "allowed_tools": ["lookup"]}]
//! }"#, Format::Json).unwrap());
//! let audit = std::sync::Arc::new(MemorySink::new());
//! let governed = ToolgateLayer::builder(handle)
//!     .shared_audit_sink(audit.clone())
//!     .build()
//!     .unwrap();
//!
//! let stack = ServiceBuilder::new()
//!     .layer(governed)
//!     .service(service_fn(|_call: ToolCall| async {
//!         Ok::<_, std::convert::Infallible>(ToolResponse::Completed(ToolOutput::new(
//!             json!({"name": "Ada", "ssn": "078-05-1120"}))))
//!     }));
//! let dev = AgentRef::profile("dev");
//! let ran = stack.clone().oneshot(ToolCall::new(dev.clone(), "lookup", json!({}))).await.unwrap();
//! let ToolResponse::Completed(out) = ran else { panic!("{ran:?}") };
//! assert_eq!(out.content["name"], "Ada");
//! assert_ne!(out.content["ssn"], "078-05-1120"); // scrubbed: `redaction.scrub_output`
//! let refused = stack.oneshot(ToolCall::new(dev, "wipe", json!({}))).await.unwrap();
//! assert_eq!(refused.refusal().unwrap().code, RefusalCode::NotAllowed);
//! assert_eq!(audit.lines().len(), 2); // the refused call is audited too
//! # }
//! ```
//!
//! One file because it is one builder: each section of the configuration and each part
//! given in code is applied in one place, in the order the diagram above draws.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};

use toolgate_core::{ChannelKind, ToolCall, ToolResponse};
use toolgate_engine::ConfigErrors;
use toolgate_engine::config::load_path;
use tower::util::{Either, option_layer};
use tower_layer::{Identity, Layer, Stack};
use tower_service::Service;

use crate::airgap::{AirGapFilter, AirGapLayer};
use crate::approval::{ApprovalChannel, ApprovalGate, ApprovalGateLayer, ToolHooks, WaitObserver};
use crate::audit::{Audit, AuditLayer, AuditSink, JsonlFileSink};
use crate::confidentiality::{ConfidentialityFilter, ConfidentialityLayer};
use crate::exposure::{ExposureFilter, ExposureLayer};
use crate::handle::GovernanceHandle;
use crate::redact::{Redactor, RedactorBuilder};
use crate::scrub::{ScrubOutput, ScrubOutputLayer};

/// The gate and what is inside it: the approval gate (7) over the optional scrub layer (8)
/// over the tool `S`.
pub type Gated<S> = ApprovalGate<Either<ScrubOutput<S>, S>>;

/// The filters: exposure (4), confidentiality (5), air gap (6), then [`Gated`].
pub type Filtered<S> = ExposureFilter<ConfidentialityFilter<AirGapFilter<Gated<S>>>>;

/// The deciding part: the input validation layers `L` (3) over [`Filtered`].
pub type Deciding<S, L> = <L as Layer<Filtered<S>>>::Service;

/// Everything a [`Toolgate`] holds: the optional audit layer (2) over [`Deciding`].
pub type Assembled<S, L> = Either<Audit<Deciding<S, L>>, Deciding<S, L>>;

/// Builds a [`ToolgateLayer`]: the handle (or a configuration file) first, then what only
/// code can supply — the approval channel, hooks, an audit sink — then
/// [`build`](ToolgateBuilder::build), which checks them against the configuration.
#[must_use]
pub struct ToolgateBuilder {
    handle: GovernanceHandle,
    channels: Vec<Arc<dyn ApprovalChannel>>,
    hooks: Option<Arc<dyn ToolHooks>>,
    audit_sink: Option<Arc<dyn AuditSink>>,
    observer: Option<Arc<dyn WaitObserver>>,
}

impl fmt::Debug for ToolgateBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolgateBuilder")
            .field("handle", &self.handle)
            .field("channels", &self.channels)
            .field("hooks", &self.hooks.is_some())
            .field("audit_sink", &self.audit_sink)
            .finish()
    }
}

impl ToolgateBuilder {
    /// The handle every part decides by (for `expose`, reloads and policy updates).
    pub fn handle(&self) -> &GovernanceHandle {
        &self.handle
    }

    /// Routes asks of `channel`'s kind to it (replacing one of the same kind): give one
    /// channel per kind the configuration routes to — `approval.channel` and every agent's
    /// own `agents[i].approval.channel` (a person at a terminal for `dev`, the durable inbox
    /// for background agents).
    pub fn channel(self, channel: impl ApprovalChannel) -> Self {
        self.shared_channel(Arc::new(channel))
    }

    /// As [`ToolgateBuilder::channel`], for a channel already shared (an inbox channel that
    /// is also used to resume held calls, for instance).
    pub fn shared_channel(mut self, channel: Arc<dyn ApprovalChannel>) -> Self {
        self.channels.retain(|c| c.kind() != channel.kind());
        self.channels.push(channel);
        self
    }

    /// Hooks every call that passes the checks (R32).
    pub fn hooks(mut self, hooks: impl ToolHooks) -> Self {
        self.hooks = Some(Arc::new(hooks));
        self
    }

    /// Tells `observer` when a call starts and stops waiting for a person (for metrics:
    /// `toolgate_otel::ApprovalMetrics`).
    pub fn wait_observer(mut self, observer: impl WaitObserver) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Writes audit records to `sink`, with the configuration's `audit` settings (failure
    /// mode, content fields). The configuration must then name no `audit.file`: one trail,
    /// named in one place.
    pub fn audit_sink(self, sink: impl AuditSink) -> Self {
        self.shared_audit_sink(Arc::new(sink))
    }

    /// As [`ToolgateBuilder::audit_sink`], for a sink already shared.
    pub fn shared_audit_sink(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit_sink = Some(sink);
        self
    }

    /// Assembles the layer, applying every section of the configuration.
    ///
    /// # Errors
    ///
    /// Every problem, each named by its configuration path:
    /// - `approval.channel`: the configuration routes asks to `interactive` or `inbox` and
    ///   no channel was given, or the given channel is of another kind;
    /// - `audit.file`: the file cannot be opened (its chain cannot be continued), or a sink
    ///   was also given in code;
    /// - `redaction.…`: a rule the redactor cannot compile.
    pub fn build(self) -> Result<ToolgateLayer, ConfigErrors> {
        let governance = self.handle.load();
        let mut errors = ConfigErrors::default();

        // Every kind asks can be routed to — the host's and each agent's own — has its
        // channel, and every channel given is routed to by someone.
        let given = |kind: ChannelKind| self.channels.iter().any(|c| c.kind() == kind);
        let needs_channel = |kind: ChannelKind| kind != ChannelKind::None;
        let configured = governance.settings().channel;
        let mut routed = Vec::new();
        for r in governance.routed_channels() {
            routed.push(r.kind);
            if needs_channel(r.kind) && !given(r.kind) {
                let whose = match r.agent {
                    None => String::from("the configuration routes asks"),
                    Some(name) => format!("agent `{name}` routes its asks"),
                };
                errors.push(
                    r.path,
                    format!(
                        "{whose} to the `{}` channel but the stack was given no `{}` channel",
                        r.kind.as_str(),
                        r.kind.as_str()
                    ),
                );
            }
        }
        for channel in &self.channels {
            if !routed.contains(&channel.kind()) {
                errors.push(
                    "approval.channel",
                    format!(
                        "the configuration names the `{}` channel but the stack was given an `{}` channel, which no agent routes to",
                        configured.as_str(),
                        channel.kind().as_str()
                    ),
                );
            }
        }

        let settings = governance.redaction_settings();
        let redactor = match RedactorBuilder::from_settings(settings)
            .regex_size_limit(governance.settings().limits.regex_size_limit)
            .build()
        {
            Ok(r) => Some(r),
            Err(e) => {
                errors.errors.extend(e.errors);
                None
            }
        };

        let audit_settings = governance.audit_settings();
        let sink: Option<Arc<dyn AuditSink>> = match (&audit_settings.file, self.audit_sink) {
            (Some(file), Some(_)) => {
                errors.push(
                    "audit.file",
                    format!(
                        "the configuration writes the audit trail to `{file}` and the stack was also given an audit sink in code; keep one"
                    ),
                );
                None
            }
            (Some(file), None) => match JsonlFileSink::open(file, audit_settings.flush) {
                Ok(s) => Some(Arc::new(s)),
                Err(e) => {
                    errors.push("audit.file", e.0);
                    None
                }
            },
            (None, given) => given,
        };

        let Some(redactor) = redactor.filter(|_| errors.is_empty()) else {
            return Err(errors);
        };
        let audit = sink.map(|sink| {
            AuditLayer::shared(sink)
                .settings(audit_settings)
                .governance(self.handle.clone())
                .redactor(redactor.clone())
        });
        let scrub = settings
            .scrub_output
            .then(|| ScrubOutputLayer::new(redactor.clone()));
        let seal = crate::handle::new_seal();
        let mut gate = ApprovalGateLayer::new(self.handle.clone()).with_seal(seal);
        for channel in self.channels {
            gate = gate.shared_channel(channel);
        }
        if let Some(hooks) = self.hooks {
            gate = gate.shared_hooks(hooks);
        }
        if let Some(observer) = self.observer {
            gate = gate.shared_wait_observer(observer);
        }
        Ok(ToolgateLayer {
            parts: Parts {
                handle: self.handle,
                redactor,
                audit,
                gate,
                scrub,
                seal,
            },
            validate_input: Identity::new(),
            outside: Identity::new(),
        })
    }
}

/// What every service a [`ToolgateLayer`] makes shares.
#[derive(Clone)]
struct Parts {
    handle: GovernanceHandle,
    redactor: Redactor,
    audit: Option<AuditLayer>,
    gate: ApprovalGateLayer,
    scrub: Option<ScrubOutputLayer>,
    /// Seals the exposure filter's decisions for the gate: nothing but toolgate's own
    /// filters stands between them.
    seal: u64,
}

/// The whole governed stack as one layer, in the only safe order (see the
/// [module docs](self)): audit → exposure → confidentiality → air gap → approval gate →
/// scrub → the tool, with every section of the configuration applied.
///
/// Built with [`ToolgateLayer::builder`] or [`ToolgateLayer::from_path`]. Two generic
/// slots take the layers other crates bring, in their place:
/// - `L`, [`validate_input`](ToolgateLayer::validate_input): between audit and exposure,
///   for a check of the input — `toolgate_mcp::SchemaValidationLayer`;
/// - `O`, [`wrap_outside`](ToolgateLayer::wrap_outside): outside audit, for an observer
///   that must see every call — `toolgate_otel`'s span (its `ToolgateLayerExt` puts it
///   there with this stack's redactor).
#[must_use]
pub struct ToolgateLayer<L = Identity, O = Identity> {
    parts: Parts,
    validate_input: L,
    outside: O,
}

impl<L: Clone, O: Clone> Clone for ToolgateLayer<L, O> {
    fn clone(&self) -> Self {
        Self {
            parts: self.parts.clone(),
            validate_input: self.validate_input.clone(),
            outside: self.outside.clone(),
        }
    }
}

impl<L, O> fmt::Debug for ToolgateLayer<L, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolgateLayer")
            .field("handle", &self.parts.handle)
            .field("audit", &self.parts.audit)
            .field("gate", &self.parts.gate)
            .field("scrub", &self.parts.scrub.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolgateLayer {
    /// Starts a composite deciding by the snapshots in `handle`.
    pub fn builder(handle: GovernanceHandle) -> ToolgateBuilder {
        ToolgateBuilder {
            handle,
            channels: Vec::new(),
            hooks: None,
            audit_sink: None,
            observer: None,
        }
    }

    /// Loads the configuration file at `path` (JSON, TOML, or YAML with the `yaml`
    /// feature) into a new handle and starts a composite over it.
    ///
    /// # Errors
    ///
    /// Every configuration error, each with its path.
    pub fn from_path(path: impl AsRef<Path>) -> Result<ToolgateBuilder, ConfigErrors> {
        let governance = load_path(path.as_ref())?;
        Ok(Self::builder(GovernanceHandle::new(governance)))
    }
}

impl<L, O> ToolgateLayer<L, O> {
    /// The handle every part decides by.
    pub fn handle(&self) -> &GovernanceHandle {
        &self.parts.handle
    }

    /// The one redactor built from the configuration's `redaction` section, used by the
    /// audit layer and the scrub layer (and by `toolgate_otel`'s span when added through
    /// its `ToolgateLayerExt`).
    pub fn redactor(&self) -> &Redactor {
        &self.parts.redactor
    }

    /// Whether the stack records an audit trail (an `audit.file` or a sink given in code).
    pub fn audits(&self) -> bool {
        self.parts.audit.is_some()
    }

    /// Whether the stack scrubs what the model receives (`redaction.scrub_output`).
    pub fn scrubs_output(&self) -> bool {
        self.parts.scrub.is_some()
    }

    /// Adds `layer` between audit and exposure (slot 3), inside any added before: a check
    /// of the call's input such as `toolgate_mcp::SchemaValidationLayer`. It sits in front
    /// of exposure because SPEC orders `invalid_input` right after `unknown_tool` (R36): a
    /// call both schema-invalid and not allowed is refused `invalid_input`, and nobody is
    /// ever asked about an input the tool would reject. Whatever it refuses is audited and
    /// never reaches the gate or the tool. It only refuses: every check of the stack still
    /// runs after it.
    pub fn validate_input<L2>(self, layer: L2) -> ToolgateLayer<Stack<L2, L>, O> {
        ToolgateLayer {
            parts: self.parts,
            validate_input: Stack::new(layer, self.validate_input),
            outside: self.outside,
        }
    }

    /// Adds `layer` outside the whole stack (slot 1), outside any added before: an observer
    /// that must see every call, refused ones included. It sees calls before they are
    /// decided and content before audit redacts it, so it must redact what it records
    /// itself — use [`ToolgateLayer::redactor`].
    pub fn wrap_outside<O2>(self, layer: O2) -> ToolgateLayer<L, Stack<O, O2>> {
        ToolgateLayer {
            parts: self.parts,
            validate_input: self.validate_input,
            outside: Stack::new(self.outside, layer),
        }
    }
}

impl<S, L, O> Layer<S> for ToolgateLayer<L, O>
where
    L: Layer<Filtered<S>>,
    O: Layer<Toolgate<S, L>>,
{
    type Service = O::Service;

    fn layer(&self, tool: S) -> Self::Service {
        let p = &self.parts;
        let gated = p.gate.layer(option_layer(p.scrub.clone()).layer(tool));
        let filtered = ExposureLayer::sealed(p.handle.clone(), p.seal).layer(
            ConfidentialityLayer::new(p.handle.clone())
                .layer(AirGapLayer::new(p.handle.clone()).layer(gated)),
        );
        let deciding = self.validate_input.layer(filtered);
        let inner = option_layer(p.audit.clone()).layer(deciding);
        self.outside.layer(Toolgate { inner })
    }
}

/// The service of [`ToolgateLayer`]: the whole governed stack around the tool `S`.
pub struct Toolgate<S, L = Identity>
where
    L: Layer<Filtered<S>>,
{
    inner: Assembled<S, L>,
}

impl<S, L> Clone for Toolgate<S, L>
where
    L: Layer<Filtered<S>>,
    Assembled<S, L>: Clone,
{
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S, L> fmt::Debug for Toolgate<S, L>
where
    L: Layer<Filtered<S>>,
    Assembled<S, L>: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toolgate")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S, L> Toolgate<S, L>
where
    L: Layer<Filtered<S>>,
{
    /// The assembled parts, outermost first.
    pub fn get_ref(&self) -> &Assembled<S, L> {
        &self.inner
    }

    /// The assembled parts, mutably.
    pub fn get_mut(&mut self) -> &mut Assembled<S, L> {
        &mut self.inner
    }

    /// Consumes the service, returning the assembled parts.
    pub fn into_inner(self) -> Assembled<S, L> {
        self.inner
    }
}

impl<S, L> Service<ToolCall> for Toolgate<S, L>
where
    L: Layer<Filtered<S>>,
    Assembled<S, L>: Service<ToolCall, Response = ToolResponse>,
{
    type Response = ToolResponse;
    type Error = <Assembled<S, L> as Service<ToolCall>>::Error;
    type Future = <Assembled<S, L> as Service<ToolCall>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: ToolCall) -> Self::Future {
        self.inner.call(call)
    }
}

#[cfg(test)]
mod tests;
