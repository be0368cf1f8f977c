//! R14 step 7 and R26's routing: the approval decision (tenant rules, quotas refusing before
//! an ask is routed, grants answering one), the extra asks of hooks, and where an ask goes.

use super::*;

impl Governance {
    /// A [`Decided`] made by **this** snapshot with asks from outside the engine (a hook's,
    /// R32) joined in: the same decision as [`Governance::decide_with`] gives with those asks,
    /// without deciding again (no look-up, no input walk, no policy evaluation). A decision
    /// that was refused before routing stays refused; one with no entry or agent (never a
    /// routed one) is returned unchanged.
    pub fn with_extra_asks(&self, decided: &Decided, run: RunContext, extra: Vec<Ask>) -> Decision {
        self.join_asks(decided, run, extra, &mut || Ok(None))
    }

    /// As [`Governance::with_extra_asks`], with the grants of `history` (R45: a grant
    /// answers the call's one question whatever asked it, a hook included). `call` is the
    /// call `decided` was made for.
    pub fn with_extra_asks_at(
        &self,
        decided: &Decided,
        call: CallView<'_>,
        extra: Vec<Ask>,
        history: &History<'_>,
    ) -> Decision {
        let Some(entry) = self.decided_entry(decided) else {
            return decided.decision.clone();
        };
        let parsed;
        let (input, literals): (&Value, &NumberLiterals) = match call.input {
            CallInput::Value(v) => (v, NumberLiterals::none()),
            CallInput::WithLiterals(v, l) => (v, l),
            CallInput::Text(text) => match self.parse_input(text) {
                Ok(v) => {
                    parsed = (v, NumberLiterals::scan(text));
                    (&parsed.0, &parsed.1)
                }
                Err(_) => return self.with_extra_asks(decided, call.run, extra),
            },
        };
        let mut find = || self.find_grant(entry, call.agent, (input, literals), history);
        self.join_asks(decided, call.run, extra, &mut find)
    }

    pub(super) fn join_asks(
        &self,
        decided: &Decided,
        run: RunContext,
        extra: Vec<Ask>,
        find_grant: &mut dyn FnMut() -> GrantLookup,
    ) -> Decision {
        let routed = !matches!(decided.decision.verdict, Verdict::Refused(_))
            || decided.decision.decided_by == Check::Routing;
        let (Some(entry), Some(agent)) = (self.decided_entry(decided), self.decided_agent(decided))
        else {
            return decided.decision.clone();
        };
        if !routed || entry.ungoverned || extra.is_empty() {
            return decided.decision.clone();
        }
        let mut asks = decided.decision.asks.clone();
        asks.extend(extra);
        let mut d = self.route_with(
            entry,
            agent,
            asks,
            decided.decision.matched_rules.clone(),
            run,
            decided.decision.approvals,
            find_grant,
        );
        d.labels.clone_from(&decided.decision.labels);
        d
    }

    /// R14 step 7: the approval decision for a call that passed steps 1–6, in named steps:
    /// the agent's own ask, the tenant policy (with the labels it reads, R49), the quotas
    /// (R44), the posture (R39–R40), then routing (R25–R26, a grant answering, R45).
    #[expect(
        clippy::too_many_arguments,
        reason = "the resolved parts of one call, each borrowed once; a struct would only rename them"
    )]
    pub(super) fn approval(
        &self,
        state: &PolicyState,
        entry: &Entry,
        agent: &ResolvedAgent,
        mode: ApprovalMode,
        call: CallView<'_>,
        (input, literals): (&Value, &NumberLiterals),
        extra_asks: Vec<Ask>,
        history: &History<'_>,
        quotas: &mut Groups,
    ) -> Decision {
        let who = call.agent;
        let mut asks: Vec<Ask> = self.agent_ask(mode, agent, entry).into_iter().collect();
        let mut said = PolicySaid::default();
        // The tenant policy (R18–R22), evaluated against every record (R24).
        match state {
            PolicyState::Unreadable(why) if entry.has_policy_kind() => {
                return Decision::refused(Refusal::new(
                    RefusalCode::PolicyUnreadable,
                    Check::TenantPolicy,
                    format!("the stored tenant policy cannot be read: {why}"),
                ));
            }
            PolicyState::Readable(policy) if self.settings.enforce_tool_invocation => {
                let (tool_labels, session_labels) = match self.labels_read(policy, entry, history) {
                    Ok(l) => l,
                    Err(refused) => return Decision::refused(refused),
                };
                let labels = crate::policy::CallLabels::new(&tool_labels, session_labels.as_ref());
                if policy.uses_labels() {
                    said.read = Some(toolgate_core::LabelsRead::new(
                        tool_labels.clone(),
                        session_labels.clone(),
                    ));
                }
                self.evaluate_records(
                    policy,
                    entry,
                    agent,
                    who,
                    (input, literals),
                    &labels,
                    &mut asks,
                    &mut said,
                );
                if let Some(reason) = said.deny.take() {
                    return said.refused(Refusal::new(
                        RefusalCode::Denied,
                        Check::TenantPolicy,
                        reason,
                    ));
                }
                // R44: a full quota refuses before any ask is routed, so nobody is asked
                // about a call that could not be sent.
                *quotas = self.quota_groups(
                    policy,
                    entry,
                    agent,
                    who,
                    history.session,
                    (input, literals),
                    &labels,
                );
                let groups = quotas.as_slice();
                if !groups.is_empty()
                    && let Err(e) = history.sends.check(groups, history.now)
                {
                    return said.refused(self.quota_refusal_in(state, groups, &e));
                }
            }
            _ => {}
        }
        said.matched_rules.sort_by_key(|m| m.index);
        if let Some(reason) = self.posture_ask(entry) {
            asks.push(Ask::new(AskSource::Posture, reason));
        }
        asks.extend(extra_asks);
        let approvals = said.approvals(state);
        let mut find = || self.find_grant(entry, who, (input, literals), history);
        let mut d = self.route_with(
            entry,
            agent,
            asks,
            said.matched_rules,
            call.run,
            approvals,
            &mut find,
        );
        d.labels = said.read;
        d
    }

    /// The agent's own ask: its effective mode for the tool is `require_approval`.
    fn agent_ask(&self, mode: ApprovalMode, agent: &ResolvedAgent, entry: &Entry) -> Option<Ask> {
        (mode == ApprovalMode::RequireApproval).then(|| {
            Ask::new(
                AskSource::Agent,
                format!(
                    "agent `{}` requires approval for `{}` (effective mode `require_approval`)",
                    agent.name, entry.name
                ),
            )
        })
    }

    /// R49: the tool's labels, and the session's before this call, when a rule or a quota
    /// selects by them. Labels that cannot be read refuse the call (fail closed).
    fn labels_read(
        &self,
        policy: &Policy,
        entry: &Entry,
        history: &History<'_>,
    ) -> Result<(crate::labels::LabelSet, Option<crate::labels::LabelSet>), Refusal> {
        let tool = if policy.uses_labels() {
            self.entry_labels(entry)
        } else {
            crate::labels::LabelSet::new()
        };
        if !policy.uses_session_labels() {
            return Ok((tool, None));
        }
        match history.sends.session_labels(history.session) {
            Ok(session) => Ok((tool, Some(session))),
            Err(e) => Err(Refusal::new(
                RefusalCode::Rejected,
                Check::TenantPolicy,
                format!(
                    "the session's labels cannot be read, so the policy's `session_labels` cannot be judged and the call is refused (fail closed, R49): {e}"
                ),
            )),
        }
    }

    /// The tenant policy's rules on every record of the call's tool (R24): the rules that
    /// matched, their asks, and the first `deny` (a rule's, or the default's).
    #[expect(
        clippy::too_many_arguments,
        reason = "the resolved parts of one call, each borrowed once; a struct would only rename them"
    )]
    fn evaluate_records(
        &self,
        policy: &Arc<Policy>,
        entry: &Entry,
        agent: &ResolvedAgent,
        who: &AgentRef,
        (input, literals): (&Value, &NumberLiterals),
        labels: &crate::policy::CallLabels<'_>,
        asks: &mut Vec<Ask>,
        said: &mut PolicySaid,
    ) {
        // The rules that could match this profile's calls to this tool, found once per
        // snapshot (a subagent's id is the rules' agent, R19: not cached).
        let subject_of = |record| record_subject(record, who.rule_name());
        let cover = match (&who.subagent, self.catalog.index_of(entry)) {
            (None, Some(e)) => self.agent_position(agent).and_then(|a| {
                self.rule_covers.get(policy, a, e, || {
                    RuleCover(
                        entry
                            .records
                            .iter()
                            .map(|r| policy.rule_candidates(&subject_of(r)))
                            .collect(),
                    )
                })
            }),
            _ => None,
        };
        for (at, record) in entry.records.iter().enumerate() {
            let eval = match cover.as_ref().and_then(|c| c.0.get(at)) {
                Some(candidates) => policy.evaluate_candidates(candidates, input, literals, labels),
                None => policy.evaluate_labelled(&subject_of(record), input, literals, labels),
            };
            for &i in &eval.matched {
                if said
                    .matched_rules
                    .iter()
                    .any(|m: &MatchedRule| m.index == i)
                {
                    continue;
                }
                if let Some(rule) = policy.rules().get(i) {
                    said.matched_rules.push(MatchedRule::new(
                        i,
                        rule.effect(),
                        rule.reason().map(str::to_owned),
                    ));
                    if rule.effect() == Effect::Ask {
                        push_unique(asks, AskSource::PolicyRule(i), rule.describe(i));
                    }
                }
            }
            match (eval.effect, eval.decided_by) {
                (Some(Effect::Deny), Some(i)) if said.deny.is_none() => {
                    said.deny = policy.rules().get(i).map(|r| r.describe(i));
                }
                (Some(Effect::Deny), None) if said.deny.is_none() => {
                    said.deny = Some(format!(
                        "the tenant policy's default is `deny` and no rule matches `{}`",
                        entry.name
                    ));
                }
                (Some(Effect::Ask), None) => push_unique(
                    asks,
                    AskSource::PolicyDefault,
                    format!(
                        "the tenant policy's default is `ask` and no rule matches `{}`",
                        entry.name
                    ),
                ),
                _ => {}
            }
        }
    }

    /// Routes a call's asks (R25–R26). With no ask, the call runs.
    pub fn route(
        &self,
        entry: &Entry,
        agent: &ResolvedAgent,
        asks: Vec<Ask>,
        matched_rules: Vec<MatchedRule>,
        run: RunContext,
    ) -> Decision {
        self.route_with(entry, agent, asks, matched_rules, run, 1, &mut || Ok(None))
    }

    /// As [`Governance::route`], with a look-up of the live grant answering the call
    /// (R45), made only where R26's order reaches grants, and the number of people who must
    /// approve it (R51: more than one only through a durable inbox, never by a grant).
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of one routing, each borrowed once; a struct would only rename them"
    )]
    pub(super) fn route_with(
        &self,
        entry: &Entry,
        agent: &ResolvedAgent,
        asks: Vec<Ask>,
        matched_rules: Vec<MatchedRule>,
        run: RunContext,
        approvals: u8,
        find_grant: &mut dyn FnMut() -> GrantLookup,
    ) -> Decision {
        let ask_reasons: Vec<String> = asks.iter().map(|a| a.reason.clone()).collect();
        let decision = |verdict, decided_by, reasons| {
            let mut d = Decision::new(verdict, decided_by, reasons);
            d.asks = asks.clone();
            d.matched_rules = matched_rules.clone();
            d.approvals = approvals;
            d
        };
        if asks.is_empty() {
            return decision(
                Verdict::Run {
                    auto_approved: false,
                },
                Check::Passed,
                Vec::new(),
            );
        }
        let refuse = |code, why: String| {
            let mut reasons = vec![why];
            reasons.extend(ask_reasons.iter().cloned());
            decision(Verdict::Refused(code), Check::Routing, reasons)
        };
        let channel = match self.channel_for(entry, agent, &asks, run, approvals) {
            Ok(channel) => channel,
            Err(Unrouted::Refused(code, why)) => return refuse(code, why),
            Err(Unrouted::AutoApproved) => {
                return decision(
                    Verdict::Run {
                        auto_approved: true,
                    },
                    Check::Routing,
                    ask_reasons.clone(),
                );
            }
        };
        // R45: a live grant answers the one question, whatever asked it; only here, after
        // every refusal that stands before it in R26's order. A grant is one person's
        // answer: never for a call that needs more (R51).
        let mut grant_trouble = None;
        let lookup = if approvals > 1 {
            Ok(None)
        } else {
            find_grant()
        };
        match lookup {
            Ok(Some(granted)) => {
                let mut d = decision(
                    Verdict::Run {
                        auto_approved: false,
                    },
                    Check::Grant,
                    ask_reasons.clone(),
                );
                d.granted = Some(granted);
                return d;
            }
            Ok(None) => {}
            // A grant store that cannot be read answers nothing: the call is asked.
            Err(why) => grant_trouble = Some(why),
        }
        let with_trouble = |mut d: Decision| {
            if let Some(why) = &grant_trouble {
                d.reasons.push(why.clone());
            }
            d
        };
        match channel {
            channel if channel.waits() && run.background => refuse(
                RefusalCode::Rejected,
                format!(
                    "a background task cannot wait for an approval on the `{}` channel",
                    channel.as_str()
                ),
            ),
            channel => with_trouble(decision(
                Verdict::Ask { channel },
                Check::Routing,
                ask_reasons.clone(),
            )),
        }
    }

    /// R26's order before anyone is asked: the run's mode, an agent used as a tool, the
    /// channel (a per-agent one replaces the host's, R39) and whether it gathers the
    /// approvals the call needs (R51). The channel the asks go to; else why not.
    fn channel_for(
        &self,
        entry: &Entry,
        agent: &ResolvedAgent,
        asks: &[Ask],
        run: RunContext,
        approvals: u8,
    ) -> Result<ChannelKind, Unrouted> {
        if run.mode == RunMode::AutoRejectRequired {
            return Err(Unrouted::Refused(
                RefusalCode::Rejected,
                String::from(
                    "the run's approval mode `auto_reject_required` rejects every asked call",
                ),
            ));
        }
        let agent_only = asks.iter().all(|a| a.source == AskSource::Agent);
        if agent_only && run.mode == RunMode::AutoApproveRequired {
            return Err(Unrouted::AutoApproved);
        }
        if agent.as_tool {
            return Err(Unrouted::Refused(
                RefusalCode::NoApprovalChannel,
                as_tool_refusal(agent, entry, Check::Routing)
                    .reasons
                    .join("; "),
            ));
        }
        let channel = self.ask_route(agent).channel;
        if channel == ChannelKind::None {
            return Err(Unrouted::Refused(
                RefusalCode::NoApprovalChannel,
                String::from(
                    "the call needs a person's approval and no approval channel is configured",
                ),
            ));
        }
        // R51: only a durable inbox gathers several people's answers.
        if approvals > 1 && channel != ChannelKind::Inbox {
            return Err(Unrouted::Refused(
                RefusalCode::NoApprovalChannel,
                format!(
                    "the call needs {approvals} approvals from distinct people (R51), and only a durable inbox can gather them; its approval channel is `{}`",
                    channel.as_str()
                ),
            ));
        }
        Ok(channel)
    }
}

pub(super) fn push_unique(asks: &mut Vec<Ask>, source: AskSource, reason: String) {
    if !asks.iter().any(|a| a.source == source) {
        asks.push(Ask::new(source, reason));
    }
}

/// What the tenant policy said about one call: the rules that matched, the first `deny`,
/// and the labels it read (R49, for the record, the span and `explain`).
#[derive(Default)]
struct PolicySaid {
    matched_rules: Vec<MatchedRule>,
    deny: Option<String>,
    read: Option<toolgate_core::LabelsRead>,
}

impl PolicySaid {
    /// The call refused with `refusal`, naming the rules that matched and the labels read.
    fn refused(mut self, refusal: Refusal) -> Decision {
        self.matched_rules.sort_by_key(|m| m.index);
        let mut d = Decision::refused(refusal);
        d.matched_rules = self.matched_rules;
        d.labels = self.read;
        d
    }

    /// R51: how many distinct people must approve — the most any matched `ask` rule asks.
    fn approvals(&self, state: &PolicyState) -> u8 {
        match state {
            PolicyState::Readable(policy) => self
                .matched_rules
                .iter()
                .filter(|m| m.effect == Effect::Ask)
                .filter_map(|m| policy.rules().get(m.index))
                .map(crate::policy::Rule::approvals)
                .max()
                .unwrap_or(1),
            PolicyState::Unreadable(_) => 1,
        }
    }
}

/// Why a call's asks go to no channel: refused, or approved by the run's mode (R26).
enum Unrouted {
    Refused(RefusalCode, String),
    AutoApproved,
}
