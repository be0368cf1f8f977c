//! Governance over time in a decision (R44, R45): the quota groups a call counts in, the
//! refusal of a full quota, recording a send, and the grant that answers an ask.

use super::*;

/// A call's quota groups: none, a slice the snapshot shares between every call of one
/// profile to one tool (`quota_cover.rs`: nothing allocated per call), or the call's own.
#[derive(Debug, Clone, Default)]
pub(super) enum Groups {
    #[default]
    None,
    Shared(Arc<[QuotaGroup]>),
    Owned(Vec<QuotaGroup>),
}

impl Groups {
    pub(super) fn as_slice(&self) -> &[QuotaGroup] {
        match self {
            Groups::None => &[],
            Groups::Shared(g) => g,
            Groups::Owned(g) => g,
        }
    }
}

impl Governance {
    /// Records that a call decided by **this** snapshot is being sent (R38, R44, R45): checks
    /// every quota group it falls in and records the send in each, atomically
    /// ([`QuotaCounter::reserve`]), then counts the send under the grant that answered it.
    /// Call it right before sending a call that runs, or an asked call once approved; a
    /// refusal means the call must not be sent.
    ///
    /// The grant is read from `decided.decision.granted`: when a hook's ask was joined
    /// later ([`Governance::with_extra_asks_at`]), put that decision into `decided` first.
    ///
    /// A full quota refuses `rate_limited`. A grant that stopped being live since the
    /// decision (spent by a concurrent call, revoked, expired) refuses `rejected`; the quota
    /// send already recorded then stays counted (strict: never more than `max` sends).
    ///
    /// When the policy (or the shadow) selects by session labels (R49), the sent tool's
    /// labels are added to the call's session in the same atomic step
    /// ([`QuotaCounter::reserve_labelled`]); a counter that keeps no labels refuses.
    pub fn record_send(&self, decided: &Decided, history: &History<'_>) -> Result<(), Refusal> {
        let groups = decided.quotas.as_slice();
        let reserved = if self.records_session_labels() {
            let labels = self
                .decided_entry(decided)
                .map(|e| self.entry_labels(e))
                .unwrap_or_default();
            history
                .sends
                .reserve_labelled(groups, history.now, history.session, &labels)
        } else {
            history.sends.reserve(groups, history.now)
        };
        if let Err(e) = reserved {
            return Err(self.quota_refusal_in(&self.policy, groups, &e));
        }
        if let Some(g) = &decided.decision.granted {
            let used = history.grants.record_use(&g.id, history.now);
            if !matches!(used, Ok(true)) {
                let why = match used {
                    Err(e) => e.to_string(),
                    _ => format!(
                        "grant `{}` no longer answers the call: it expired, was revoked or was spent",
                        g.id
                    ),
                };
                return Err(Refusal::with_reasons(
                    RefusalCode::Rejected,
                    Check::Grant,
                    std::iter::once(why)
                        .chain(decided.decision.reasons.iter().cloned())
                        .collect(),
                ));
            }
        }
        Ok(())
    }

    /// Whether sends record their tools' labels in their sessions (R49): the enforced or
    /// the shadow policy selects by `session_labels`.
    pub fn records_session_labels(&self) -> bool {
        let uses =
            |p: &PolicyState| matches!(p, PolicyState::Readable(p) if p.uses_session_labels());
        uses(&self.policy)
            || self
                .shadow
                .as_ref()
                .is_some_and(|s| s.uses_session_labels())
    }

    /// The refusal for a counter's answer about `groups` (R44): `rate_limited` with the
    /// quotas' reasons and `retry_after_secs` when full; refused (fail closed) when the
    /// counter cannot be used. For a host that reserves sends itself (an asynchronous
    /// counter) and must refuse as [`Governance::record_send`] does.
    pub fn quota_refusal(&self, groups: &[QuotaGroup], err: &QuotaError) -> Refusal {
        self.quota_refusal_in(&self.policy, groups, err)
    }

    /// As [`Governance::quota_refusal`], with the quotas of `policy` (the enforced one or
    /// the shadow, R46).
    pub(super) fn quota_refusal_in(
        &self,
        policy: &PolicyState,
        groups: &[QuotaGroup],
        err: &QuotaError,
    ) -> Refusal {
        let policy = match policy {
            PolicyState::Readable(p) => Some(p.as_ref()),
            PolicyState::Unreadable(_) => None,
        };
        match err {
            QuotaError::Full(full) => {
                let mut reasons: Vec<String> = Vec::new();
                for &i in &full.full {
                    let Some(g) = groups.get(i) else { continue };
                    let why = policy
                        .and_then(|p| p.quotas().get(g.quota))
                        .map(|q| q.describe(g.quota))
                        .unwrap_or_else(|| format!("tenant policy quota {} is full", g.quota));
                    if !reasons.contains(&why) {
                        reasons.push(why);
                    }
                }
                let secs = full.retry_after_secs();
                reasons.push(format!(
                    "the call's quota is full; it could run again in {secs} s (R44)"
                ));
                let mut r = Refusal::with_reasons(RefusalCode::RateLimited, Check::Quota, reasons);
                r.retry_after_secs = Some(secs);
                r
            }
            QuotaError::Unavailable(why) => Refusal::new(
                RefusalCode::RateLimited,
                Check::Quota,
                format!(
                    "the quota counter cannot be used, so the call is refused (fail closed): {why}"
                ),
            ),
        }
    }

    /// The groups of every quota covering a call (R44): a quota covers the call when it
    /// covers any of its records (R24). Read from the snapshot's cover of the (profile,
    /// tool) pair (`quota_cover.rs`): only quotas with a `when` or a session key are looked
    /// at per call, and a call with neither allocates nothing.
    #[expect(
        clippy::too_many_arguments,
        reason = "the resolved parts of one call, each borrowed once; a struct would only rename them"
    )]
    pub(super) fn quota_groups(
        &self,
        policy: &Arc<Policy>,
        entry: &Entry,
        agent: &ResolvedAgent,
        who: &AgentRef,
        session: Option<&str>,
        (input, literals): (&Value, &NumberLiterals),
        labels: &crate::policy::CallLabels<'_>,
    ) -> Groups {
        if policy.quotas().is_empty() {
            return Groups::None;
        }
        let build = || self.quota_cover(policy, entry, who.rule_name());
        // A subagent's id is the rules' agent (R19): such calls are not cached.
        let cached = match (
            &who.subagent,
            self.agent_position(agent),
            self.catalog.index_of(entry),
        ) {
            (None, Some(a), Some(e)) => self.quota_covers.get(policy, a, e, build),
            _ => None,
        };
        let (held, owned);
        let cover: &Cover = match cached {
            Some(h) => {
                held = h;
                &held
            }
            None => {
                owned = build();
                &owned
            }
        };
        if let Some(fixed) = &cover.fixed {
            return Groups::Shared(Arc::clone(fixed));
        }
        let mut out = Vec::new();
        // R49: the call's labels as masks, once, for the quotas that select by labels.
        let bits = policy.call_bits(labels);
        for item in &cover.items {
            match item {
                Item::Fixed(g) => out.push(g.clone()),
                Item::PerCall {
                    quota,
                    by_input,
                    labels: masks,
                } => {
                    let covers = match masks {
                        // A quota without `when` is a candidate because its selectors select
                        // a record of this pair: only its label tests are left to judge.
                        Some(m) => Policy::masks_hold(*m, bits),
                        None => {
                            !*by_input
                                || entry.records.iter().any(|r| {
                                    let id = r.identity();
                                    let subject = Subject {
                                        kind: id.kind(),
                                        tool: id.name(),
                                        server: id.server(),
                                        agent: who.rule_name(),
                                    };
                                    policy.quota_covers(*quota, &subject, input, literals, labels)
                                })
                        }
                    };
                    if !covers {
                        continue;
                    }
                    out.extend(quota_group(
                        policy,
                        *quota,
                        entry,
                        who.rule_name(),
                        session,
                        Some((input, literals)),
                    ));
                }
            }
        }
        // R49: the quotas that select by labels alone, only those filed under the call's
        // labels; their groups take their place in policy order.
        if let Some(call) = bits.filter(|_| !cover.by_labels.is_empty()) {
            let before = out.len();
            cover.by_labels.for_each_holding(call, |quota| {
                out.extend(quota_group(
                    policy,
                    quota,
                    entry,
                    who.rule_name(),
                    session,
                    Some((input, literals)),
                ));
            });
            if out.len() > before {
                out.sort_by_key(|g| g.quota);
            }
        }
        if out.is_empty() {
            Groups::None
        } else {
            Groups::Owned(out)
        }
    }

    /// Which quotas could cover the calls of `agent` (the rules' agent name) to `entry`,
    /// and the groups of those that cover every such call the same way.
    pub(super) fn quota_cover(&self, policy: &Policy, entry: &Entry, agent: &str) -> Cover {
        let mut candidates: Vec<(usize, bool)> = Vec::new();
        for record in &entry.records {
            let id = record.identity();
            let subject = Subject {
                kind: id.kind(),
                tool: id.name(),
                server: id.server(),
                agent,
            };
            policy.quota_candidates(&subject, &mut candidates);
        }
        // A quota that covers one record whatever the input covers the call (R24): sorted,
        // its `false` comes first and is the one kept.
        candidates.sort_unstable();
        candidates.dedup_by_key(|c| c.0);
        let items = candidates
            .into_iter()
            .filter_map(|(i, by_input)| {
                let q = policy.quotas().get(i)?;
                let per_call =
                    q.per().contains(&PerKey::Session) || q.per().contains(&PerKey::Input);
                Some(if by_input || per_call {
                    Item::PerCall {
                        quota: i,
                        by_input,
                        labels: policy.quota_label_masks(i),
                    }
                } else {
                    Item::Fixed(quota_group(policy, i, entry, agent, None, None)?)
                })
            })
            .collect();
        Cover::new(items)
    }

    /// The first live grant answering a call (R45): it must match every record (R24).
    pub(super) fn find_grant(
        &self,
        entry: &Entry,
        who: &AgentRef,
        (input, literals): (&Value, &NumberLiterals),
        history: &History<'_>,
    ) -> GrantLookup {
        history
            .grants
            .first_live(history.now, &mut |g| {
                entry.records.iter().all(|r| {
                    let id = r.identity();
                    let subject = Subject {
                        kind: id.kind(),
                        tool: id.name(),
                        server: id.server(),
                        agent: who.rule_name(),
                    };
                    g.matches(&subject, history.session, input, literals)
                }) && self.granter_may_answer(g, entry, who.rule_name())
            })
            .map_err(|e| e.to_string())
    }
}

impl Governance {
    /// R45, R47, R52: a grant answers a call only while the person who gave it may answer
    /// that call under the rights in force in this snapshot, judged on every record the
    /// host knows behind the name (declared and discovered). Without an `approvers`
    /// section anyone's grant answers (nobody's rights are configured).
    fn granter_may_answer(&self, grant: &crate::grant::Grant, entry: &Entry, agent: &str) -> bool {
        let Some(approvers) = self.approver_settings() else {
            return true;
        };
        let identities: Vec<toolgate_core::ToolIdentity> =
            entry.records.iter().map(|r| r.identity().clone()).collect();
        approvers.grant_may_answer(grant.granted_by(), &identities, agent)
    }
}

/// A grant look-up's answer: the grant that answers, none, or why the grants could not be
/// read.
pub(super) type GrantLookup = Result<Option<toolgate_core::Granted>, String>;

/// How the rules see one record of a call by `agent` (R19, R24).
pub(super) fn record_subject<'a>(
    record: &'a crate::catalog::Record,
    agent: &'a str,
) -> Subject<'a> {
    let id = record.identity();
    Subject {
        kind: id.kind(),
        tool: id.name(),
        server: id.server(),
        agent,
    }
}

/// Quota `i`'s group for a call of `agent` (the rules' agent name) to `entry` in `session`,
/// with `input` (R50: read only by a quota `per: ["input"]`; `None` for a fixed group, which
/// no such quota has).
pub(super) fn quota_group(
    policy: &Policy,
    i: usize,
    entry: &Entry,
    agent: &str,
    session: Option<&str>,
    input: Option<(&Value, &NumberLiterals)>,
) -> Option<QuotaGroup> {
    let q = policy.quotas().get(i)?;
    let agent = lower_key(agent);
    let input_key = if q.per().contains(&PerKey::Input) {
        Some(input_key(input?.0))
    } else {
        None
    };
    // `per` names each of its four keys at most once (validated).
    let mut parts: [Option<&str>; 4] = [None; 4];
    for (part, k) in parts.iter_mut().zip(q.per()) {
        *part = match k {
            PerKey::Agent => Some(agent.as_ref()),
            PerKey::Session => session,
            PerKey::Tool => Some(entry.key.as_str()),
            PerKey::Input => input_key.as_deref(),
        };
    }
    let parts = parts.get(..q.per().len()).unwrap_or(&parts);
    let key = group_key(q.counter_id(), parts);
    Some(QuotaGroup::new(key, i, q.max(), q.window_ms()))
}

/// A call's input as a quota group's `input` part (R50): its canonical JSON (RFC 8785:
/// object keys sorted, numbers by numeric value, strings exactly), so that two inputs equal
/// as R20's `equals` has them are one group. Integers past what a double holds exactly are
/// compared by their nearest double here: two such inputs may share a group (counted
/// together: the stricter reading), never the reverse.
///
/// The part is the SHA-256 of that text (hex), so a group's key stays short whatever the
/// input's size.
pub(super) fn input_key(input: &Value) -> String {
    let text = crate::canon::canonical_json(input).unwrap_or_else(|| input.to_string());
    crate::canon::sha256_hex(text.as_bytes())
}
