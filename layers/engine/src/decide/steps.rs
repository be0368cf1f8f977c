//! R14 steps 1–6 of a decision: the look-up of tool and agent, the input's bounds and schema,
//! the allowed names, confidentiality, the air gap, the agent's mode and the behaviour posture;
//! and the exposure those steps make (R6–R13).

use super::*;

impl Governance {
    /// R14 step 1: the tool resolves to a registered tool.
    pub fn lookup(&self, tool: &ToolRef) -> Result<&Entry, Refusal> {
        let unknown = |shown: String| {
            Refusal::new(
                RefusalCode::UnknownTool,
                Check::UnknownTool,
                format!("no registered tool is named `{shown}`"),
            )
        };
        match tool {
            ToolRef::Name(name) => self.catalog.get(name).ok_or_else(|| unknown(name.clone())),
            ToolRef::Identity(id) => self
                .catalog
                .get_identity(id)
                .ok_or_else(|| unknown(tool.display_name())),
            ToolRef::Both { name, identity } => {
                let by_name = self.catalog.get(name);
                let by_id = self.catalog.get_identity(identity);
                match (by_name, by_id) {
                    (Some(a), Some(b)) if a.key == b.key => Ok(a),
                    (Some(_), Some(_)) => Err(Refusal::new(
                        RefusalCode::UnknownTool,
                        Check::UnknownTool,
                        format!(
                            "the call names `{name}` and {identity}, which are different tools"
                        ),
                    )),
                    _ => Err(unknown(name.clone())),
                }
            }
        }
    }

    /// R36: the input is an object within the size and depth bounds. Never recurses past
    /// the depth bound.
    pub fn check_input(&self, input: &Value) -> Result<(), Refusal> {
        self.check_input_exact(input, NumberLiterals::none())
    }

    /// As [`Governance::check_input`], counting numbers as written where `literals` records
    /// them (SPEC §8: the compact serialisation has each number as written).
    pub fn check_input_exact(
        &self,
        input: &Value,
        literals: &NumberLiterals,
    ) -> Result<(), Refusal> {
        // R14: a test counts these to show a call is decided once through a whole stack.
        tracing::trace!(target: "toolgate_engine::input_bounds", "the input's bounds walked");
        let limits = &self.settings.limits;
        // One walk for both bounds (the depth is still reported first, SPEC §8).
        let m = number::measure(
            input,
            literals,
            limits.max_input_depth,
            limits.max_input_bytes,
        );
        if m.too_deep {
            return Err(too_deep(limits.max_input_depth));
        }
        if !input.is_object() {
            return Err(Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                "the input must be a JSON object",
            ));
        }
        if !m.within {
            return Err(too_big(limits.max_input_bytes));
        }
        Ok(())
    }

    /// R14 step 2 (with R39): the profile exists and allows the tool.
    pub fn check_allowed<'g>(
        &'g self,
        agent: &AgentRef,
        entry: &Entry,
    ) -> Result<&'g ResolvedAgent, Refusal> {
        let Some(profile) = self.agent(&agent.profile) else {
            return Err(Refusal::new(
                RefusalCode::NotAllowed,
                Check::Allowed,
                format!("no agent profile is named `{}`", agent.profile),
            ));
        };
        // SPEC §8: a subagent id never shadows a profile. Rules' `agent` patterns match the
        // subagent id (R19), so an id that is another profile's name would take that
        // profile's rules by accident; such a call is refused at this step.
        if let Some(id) = &agent.subagent
            && let Some(other) = self.agent(id)
            && !std::ptr::eq(other, profile)
        {
            return Err(Refusal::new(
                RefusalCode::NotAllowed,
                Check::Allowed,
                format!(
                    "subagent id `{id}` is the name of agent profile `{}`, but the call runs under profile `{}`: a subagent id may not shadow a profile",
                    other.name, profile.name
                ),
            ));
        }
        if !profile.allows(&entry.key) {
            return Err(not_allowed(profile, entry));
        }
        Ok(profile)
    }

    /// R14 step 3: confidential work (R7).
    pub fn check_confidential(&self, agent: &ResolvedAgent, entry: &Entry) -> Result<(), Refusal> {
        if agent.confidential && entry.confidential {
            return Err(
                reason(OmissionKind::Confidential, agent, entry).refusal(Check::Confidentiality)
            );
        }
        Ok(())
    }

    /// R14 step 4: the air gap (R8).
    pub fn check_air_gap(&self, entry: &Entry) -> Result<(), Refusal> {
        if self.air_gap_holds_back(entry) {
            let why = Reason {
                kind: OmissionKind::AirGapped,
                tool: &entry.name,
                agent: "",
            };
            return Err(why.refusal(Check::AirGap));
        }
        Ok(())
    }

    fn air_gap_holds_back(&self, entry: &Entry) -> bool {
        self.settings.air_gapped && entry.network == NetworkScope::Egress
    }

    /// R14 steps 5–6: the effective mode denies (R10), or wraps a tool for an agent with no
    /// approval channel (R11). Returns the effective mode.
    pub fn check_agent_mode(
        &self,
        agent: &ResolvedAgent,
        entry: &Entry,
    ) -> Result<ApprovalMode, Refusal> {
        self.agent_mode(agent, entry)
            .map_err(|kind| reason(kind, agent, entry).refusal(Check::AgentMode))
    }

    /// [`Governance::check_agent_mode`] without writing its reason.
    fn agent_mode(
        &self,
        agent: &ResolvedAgent,
        entry: &Entry,
    ) -> Result<ApprovalMode, OmissionKind> {
        let mode = self.effective_mode(agent, entry);
        if mode == ApprovalMode::Deny {
            return Err(OmissionKind::Denied);
        }
        if mode == ApprovalMode::RequireApproval && agent.as_tool {
            return Err(OmissionKind::NoApprovalChannel);
        }
        Ok(mode)
    }

    /// Whether the posture gates this tool, and why (R12, R27–R31).
    pub fn posture_ask(&self, entry: &Entry) -> Option<String> {
        if !(self.settings.require_approval_for_non_read_only
            && self.settings.enforce_tool_invocation)
        {
            return None;
        }
        entry.posture_gated().map(|why| {
            format!(
                "`{}` has not credibly declared itself read-only: {why} (behaviour posture)",
                entry.name
            )
        })
    }

    /// Steps 2–6 and the routing of an exposure, with no text written: the omission's kind
    /// and check are those of the invocation refusals above, in their order (R16).
    pub(super) fn standing(&self, agent: &ResolvedAgent, entry: &Entry) -> Standing {
        if !agent.allows(&entry.key) {
            return Standing::Omitted(OmissionKind::NotAllowed, Check::Allowed);
        }
        if agent.confidential && entry.confidential {
            return Standing::Omitted(OmissionKind::Confidential, Check::Confidentiality);
        }
        if self.air_gap_holds_back(entry) {
            return Standing::Omitted(OmissionKind::AirGapped, Check::AirGap);
        }
        let mode = match self.agent_mode(agent, entry) {
            Ok(m) => m,
            Err(kind) => return Standing::Omitted(kind, Check::AgentMode),
        };
        if entry.ungoverned {
            // R42: the approval decision never applies, so the tool is never wrapped.
            return Standing::Raw;
        }
        // Whether the posture gates the tool, without writing its reason (exposure only).
        let posture = self.settings.require_approval_for_non_read_only
            && self.settings.enforce_tool_invocation
            && entry.posture_gated().is_some();
        if mode == ApprovalMode::RequireApproval || posture {
            if agent.as_tool {
                // R11: a tool the posture would wrap is omitted too.
                return Standing::Omitted(OmissionKind::NoApprovalChannel, Check::Routing);
            }
            return Standing::Wrapped;
        }
        Standing::Raw
    }

    /// The tools one agent's model is shown, and those omitted with their refusal
    /// (R6–R13). A copy of [`Governance::exposure`].
    pub fn expose(&self, agent: &str) -> Result<Exposure, UnknownAgent> {
        self.exposure(agent).map(|e| (*e).clone())
    }

    /// As [`Governance::expose`], shared: computed once per agent per snapshot, so an agent
    /// asking for its tool list every turn costs one look-up and one `Arc` clone.
    ///
    /// ```
    /// use toolgate_core::{ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::{AgentProfile, Governance};
    /// let gov = Governance::builder()
    ///     .tool(ToolDeclaration::new(ToolIdentity::http("refund_order")))
    ///     .agent(AgentProfile::new("support").allow(["refund_order"]))
    ///     .build().unwrap();
    /// let first = gov.exposure("support").unwrap();
    /// let again = gov.exposure("SUPPORT").unwrap();
    /// assert!(std::sync::Arc::ptr_eq(&first, &again));
    /// assert_eq!(&*first.tools[0].name, "refund_order");
    /// ```
    pub fn exposure(&self, agent: &str) -> Result<std::sync::Arc<Exposure>, UnknownAgent> {
        let unknown = || UnknownAgent(agent.to_owned());
        let &index = self
            .agent_index
            .get(toolgate_core::names::lower_key(agent).as_ref())
            .ok_or_else(unknown)?;
        let profile = self.agents.get(index).ok_or_else(unknown)?;
        self.exposures
            .get_or_init(index, || self.compute_exposure(profile))
            .ok_or_else(unknown)
    }

    pub(super) fn compute_exposure(&self, profile: &ResolvedAgent) -> Exposure {
        // Sized once: growing the lists by doubling was over half of a first exposure's
        // instructions at 10,000 tools, each step a reallocation and a copy.
        // Whatever is left over is given back below (the exposure is kept per agent).
        let mut tools = Vec::with_capacity(self.catalog.entries().len());
        let mut omitted = Vec::new();
        // One shared copy of the agent's name for every omission's reason.
        let agent: Arc<str> = Arc::from(profile.name.as_str());
        // Walked in name order (sealed once per snapshot): no sort, no key allocation. Names
        // and descriptions are the catalog's shared text and reasons are written when read,
        // so nothing here copies a string.
        for entry in self.catalog.sorted() {
            let text = &entry.shared;
            match self.standing(profile, entry) {
                Standing::Raw => tools.push(ExposedTool {
                    name: Arc::clone(&text.name),
                    wrapped: false,
                    description: text.description.clone(),
                }),
                Standing::Wrapped => tools.push(ExposedTool {
                    name: Arc::clone(&text.name),
                    wrapped: true,
                    description: text.description.clone(),
                }),
                Standing::Omitted(kind, check) => omitted.push(OmittedTool {
                    name: Arc::clone(&text.name),
                    refusal: Omission::new(kind, check, Arc::clone(&text.name), Arc::clone(&agent)),
                }),
            }
        }
        tools.shrink_to_fit();
        Exposure {
            agent: profile.name.clone(),
            tools,
            omitted,
        }
    }

    /// Parses input text after measuring its depth (R36, SPEC §8).
    pub(super) fn parse_input(&self, text: &str) -> Result<Value, Refusal> {
        let limits = &self.settings.limits;
        if json::raw_depth(text) > limits.max_input_depth {
            return Err(too_deep(limits.max_input_depth));
        }
        let mut de = serde_json::Deserializer::from_str(text);
        // The depth was just measured to be within the bound, which is itself bounded
        // (MAX_INPUT_DEPTH_CEILING), so parsing cannot run away.
        de.disable_recursion_limit();
        let v = <Value as serde::Deserialize>::deserialize(&mut de).map_err(|e| {
            Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                format!("the input is not valid JSON: {e}"),
            )
        })?;
        de.end().map_err(|e| {
            Refusal::new(
                RefusalCode::InvalidInput,
                Check::InputBounds,
                format!("the input is not valid JSON: {e}"),
            )
        })?;
        Ok(v)
    }
}

/// The reason of one omission kind for this agent and tool (the text is written when read).
fn reason<'a>(kind: OmissionKind, agent: &'a ResolvedAgent, entry: &'a Entry) -> Reason<'a> {
    Reason {
        kind,
        tool: &entry.name,
        agent: &agent.name,
    }
}

pub(super) fn not_allowed(agent: &ResolvedAgent, entry: &Entry) -> Refusal {
    reason(OmissionKind::NotAllowed, agent, entry).refusal(Check::Allowed)
}

pub(super) fn as_tool_refusal(agent: &ResolvedAgent, entry: &Entry, check: Check) -> Refusal {
    reason(OmissionKind::NoApprovalChannel, agent, entry).refusal(check)
}

pub(super) fn too_deep(limit: usize) -> Refusal {
    Refusal::new(
        RefusalCode::InvalidInput,
        Check::InputBounds,
        format!("the input nests deeper than the limit `max_input_depth` ({limit})"),
    )
}

pub(super) fn too_big(limit: usize) -> Refusal {
    Refusal::new(
        RefusalCode::InvalidInput,
        Check::InputBounds,
        format!(
            "the input is larger than the limit `max_input_bytes` ({limit} bytes, compact JSON)"
        ),
    )
}
