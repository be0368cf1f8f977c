//! Paged, filtered reads of the held calls (held-calls.md, "Pages of held calls"): what the
//! approval page lists at thousands of held calls without reading them all, and the change
//! feed its live update is made of.
//!
//! [`HeldQuery`] says which calls (pending or answered, by agent, tool, server, session,
//! reason source, age and input text) and in which order; [`HeldCalls::query_held`]
//! returns one [`HeldPage`] of them after a [`HeldCursor`], [`HeldCalls::count_held`] how
//! many match, and [`HeldCalls::changed_since`] the calls changed since a moment. The
//! backends answer each with one SQL statement over an index; the provided methods (and
//! [`HeldQuery::matches`], which says what a filter means) list and filter in memory, with
//! the same results.
//!
//! [`HeldCalls::query_held`]: crate::HeldCalls::query_held
//! [`HeldCalls::count_held`]: crate::HeldCalls::count_held
//! [`HeldCalls::changed_since`]: crate::HeldCalls::changed_since

use crate::model::{HeldRecord, State, Timestamp};

/// The most calls one [`HeldQuery`] page returns: a larger `limit` is cut to this.
pub const MAX_PAGE: usize = 1_000;

/// Which held calls a page lists: the pending ones, or the answered (every other state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Listing {
    /// `pending` calls only.
    #[default]
    Pending,
    /// Every call that is not `pending` (answered, expired, cancelled, sent).
    History,
}

/// The order of a page: by the moment the call was held, then its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest held first.
    #[default]
    OldestFirst,
    /// Newest held first.
    NewestFirst,
}

/// Where a page starts: after the call held at `created_at` with id `id`, in the page's
/// order (keyset paging: a page stays right while calls come and go before it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeldCursor {
    /// The last listed call's `created_at`.
    pub created_at: Timestamp,
    /// The last listed call's interaction id.
    pub id: String,
}

impl HeldCursor {
    /// The cursor just after `record`.
    pub fn after(record: &HeldRecord) -> Self {
        Self {
            created_at: record.call.created_at,
            id: record.id().to_owned(),
        }
    }

    /// As text for a link: `<millis>.<id>`.
    ///
    /// ```
    /// use toolgate_inbox::{HeldCursor, Timestamp};
    /// let c = HeldCursor { created_at: Timestamp::from_millis(17), id: "ia_x.y".into() };
    /// assert_eq!(c.to_text(), "17.ia_x.y");
    /// assert_eq!(HeldCursor::parse("17.ia_x.y"), Some(c));
    /// assert_eq!(HeldCursor::parse("x.y"), None);
    /// ```
    pub fn to_text(&self) -> String {
        format!("{}.{}", self.created_at.as_millis(), self.id)
    }

    /// Reads [`HeldCursor::to_text`]'s form back.
    pub fn parse(text: &str) -> Option<Self> {
        let (ms, id) = text.split_once('.')?;
        Some(Self {
            created_at: Timestamp::from_millis(ms.parse().ok()?),
            id: id.to_owned(),
        })
    }
}

/// A filtered, ordered page request over the held calls. Every filter given must hold (they
/// combine with *and*); an absent one selects everything.
///
/// ```
/// use toolgate_inbox::{HeldQuery, Order};
/// let q = HeldQuery::pending().tool("refund").text("A-17").order(Order::NewestFirst).limit(25);
/// assert_eq!(q.limit, 25);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldQuery {
    /// Pending, or answered.
    pub listing: Listing,
    /// The order.
    pub order: Order,
    /// Only calls of this agent: its profile or its subagent's name, exactly.
    pub agent: Option<String>,
    /// Only calls to this tool (its name as held, exactly).
    pub tool: Option<String>,
    /// Only calls to a tool of this server or toolset (one of its identities' source,
    /// exactly).
    pub server: Option<String>,
    /// Only calls held in this session, exactly.
    pub session: Option<String>,
    /// Only calls with a reason of this source kind ([`toolgate_core::AskSource::kind`]:
    /// `agent`, `policy_rule`, `policy_default`, `posture`, `hook`).
    pub reason_source: Option<String>,
    /// Only calls held at or before this moment (older than an age).
    pub held_before: Option<Timestamp>,
    /// Only calls held at or after this moment (younger than an age).
    pub held_after: Option<Timestamp>,
    /// Only calls whose stored input text contains this, ASCII case-insensitively.
    pub text: Option<String>,
    /// Start after this call (in [`HeldQuery::order`]); `None`: from the first.
    pub after: Option<HeldCursor>,
    /// At most this many calls (at most [`MAX_PAGE`]; 0 is taken as 1).
    pub limit: usize,
    /// Only the calls one approver may see ([`VisibleTo`]); `None`: every call.
    pub visible_to: Option<VisibleTo>,
}

/// Only the held calls an approver with `tools` selectors may see (held-calls.md, "Pages of
/// held calls"): the calls they may answer — every identity behind the call's tool matched
/// by one of the selectors, for the call's agent ([`Approver::may_answer`]) — and the calls
/// they answered themselves. The backends put this into their one statement, so that a
/// person whose rights cover few of many calls reads one page, not every call.
///
/// ```
/// use toolgate_engine::approvers::ToolSelector;
/// use toolgate_engine::policy::Glob;
/// use toolgate_inbox::{HeldQuery, VisibleTo};
/// let bob = VisibleTo {
///     selectors: vec![ToolSelector { server: Some(Glob::new("github")), ..Default::default() }],
///     approver: "bob".into(),
/// };
/// let q = HeldQuery { visible_to: Some(bob), ..HeldQuery::pending() };
/// assert!(q.visible_to.is_some());
/// ```
///
/// [`Approver::may_answer`]: toolgate_engine::approvers::Approver::may_answer
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibleTo {
    /// The approver's `tools` selectors (an empty list covers no call).
    pub selectors: Vec<toolgate_engine::approvers::ToolSelector>,
    /// The approver's name: the calls they answered are theirs to see.
    pub approver: String,
}

impl VisibleTo {
    /// Whether the approver sees `r`: what the backends' SQL implements.
    pub fn sees(&self, r: &HeldRecord) -> bool {
        let agent = r.call.agent.rule_name();
        let covered = !r.call.identities.is_empty()
            && r.call
                .identities
                .iter()
                .all(|id| self.selectors.iter().any(|s| s.matches(id, agent)));
        covered || r.approver.as_deref() == Some(self.approver.as_str())
    }

    /// The SQL condition (over the backends' `held_calls` table) that says
    /// [`VisibleTo::sees`], in `dialect`; each value is handed to `param`, which returns its
    /// placeholder (`?3`, `$3`). For a backend's statement builder.
    pub fn sql(&self, dialect: SqlDialect, param: &mut dyn FnMut(String) -> String) -> String {
        let (length, first, elems, each): (&str, Field, &str, Field) = match dialect {
            SqlDialect::Sqlite => (
                "json_array_length(held_calls.identities)",
                |k| format!("json_extract(held_calls.identities, '$[0].{k}')"),
                "json_each(held_calls.identities) AS i",
                |k| format!("json_extract(i.value, '$.{k}')"),
            ),
            SqlDialect::Postgres => (
                "jsonb_array_length(held_calls.identities::jsonb)",
                |k| format!("(held_calls.identities::jsonb -> 0 ->> '{k}')"),
                "jsonb_array_elements(held_calls.identities::jsonb) AS i(value)",
                |k| format!("(i.value ->> '{k}')"),
            ),
        };
        let f = match dialect {
            SqlDialect::Sqlite => "0",
            SqlDialect::Postgres => "FALSE",
        };
        // INVARIANT: fail closed — an identity a selector cannot be read against (a missing
        // field, NULL) counts as not covered; so does a call with no identity.
        let covered = if self.selectors.is_empty() {
            f.to_owned()
        } else {
            // One identity (nearly every call) is read in place; several, one by one.
            let one = self.any_selector(dialect, first, param);
            let every = self.any_selector(dialect, each, param);
            format!(
                "(CASE WHEN {length} = 1 THEN COALESCE({one}, {f}) WHEN {length} > 1 THEN \
                 NOT EXISTS (SELECT 1 FROM {elems} WHERE NOT COALESCE({every}, {f})) ELSE {f} END)"
            )
        };
        format!(
            "({covered} OR held_calls.approver = {})",
            param(self.approver.clone())
        )
    }

    /// The condition that one identity (its fields read by `field`) is matched by one of the
    /// selectors, for the call's agent.
    fn any_selector(
        &self,
        dialect: SqlDialect,
        field: Field,
        param: &mut dyn FnMut(String) -> String,
    ) -> String {
        let t = match dialect {
            SqlDialect::Sqlite => "1",
            SqlDialect::Postgres => "TRUE",
        };
        // ASCII letters only, as `Glob` folds (PostgreSQL's `lower` folds every letter).
        let fold = |x: &str| match dialect {
            SqlDialect::Sqlite => format!("lower({x})"),
            SqlDialect::Postgres => format!(
                "translate({x}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
            ),
        };
        let mut any = Vec::with_capacity(self.selectors.len());
        for s in &self.selectors {
            let mut all = Vec::new();
            if let Some(k) = s.kind {
                all.push(format!(
                    "{} = {}",
                    field("kind"),
                    param(k.as_str().to_owned())
                ));
            }
            if let Some(g) = &s.server {
                all.push(format!(
                    "{} = 'mcp' AND {} LIKE {} ESCAPE '\\'",
                    field("kind"),
                    fold(&field("source")),
                    param(like_pattern(g.as_str()))
                ));
            }
            if let Some(g) = &s.tool {
                all.push(format!(
                    "{} LIKE {} ESCAPE '\\'",
                    fold(&field("name")),
                    param(like_pattern(g.as_str()))
                ));
            }
            if let Some(g) = &s.agent {
                all.push(format!(
                    "{} LIKE {} ESCAPE '\\'",
                    fold("COALESCE(held_calls.agent_subagent, held_calls.agent_profile)"),
                    param(like_pattern(g.as_str()))
                ));
            }
            any.push(if all.is_empty() {
                t.to_owned()
            } else {
                format!("({})", all.join(" AND "))
            });
        }
        format!("({})", any.join(" OR "))
    }
}

/// How a statement reads one field (`kind`, `source`, `name`) of an identity.
type Field = fn(&str) -> String;

/// The SQL dialect a statement is built for ([`VisibleTo::sql`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SqlDialect {
    /// SQLite (its JSON1 functions).
    Sqlite,
    /// PostgreSQL (`jsonb`).
    Postgres,
}

/// A `Glob` pattern as a `LIKE` pattern (escape `\`): ASCII-lower-cased, `*` as `%`, and
/// `%`, `_` and `\` taken literally.
pub(crate) fn like_pattern(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len() + 4);
    for c in glob.chars() {
        match c {
            '*' => out.push('%'),
            '%' | '_' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c.to_ascii_lowercase()),
        }
    }
    out
}

impl HeldQuery {
    /// The pending calls, oldest first, 50 a page.
    pub fn pending() -> Self {
        Self {
            limit: 50,
            ..Self::default()
        }
    }

    /// The answered calls, newest first, 50 a page.
    pub fn history() -> Self {
        Self {
            listing: Listing::History,
            order: Order::NewestFirst,
            limit: 50,
            ..Self::default()
        }
    }

    /// With this order.
    #[must_use]
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Only calls to `tool`.
    #[must_use]
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Only calls whose input text contains `text`.
    #[must_use]
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// At most `n` a page.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n;
        self
    }

    /// The page size the backends use: `limit` within 1 ..= [`MAX_PAGE`].
    pub fn page_size(&self) -> usize {
        self.limit.clamp(1, MAX_PAGE)
    }

    /// The text searched for, lower-cased (ASCII), or `None` when there is none or it is
    /// empty.
    pub fn text_lower(&self) -> Option<String> {
        self.text
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(str::to_ascii_lowercase)
    }

    /// Whether `r` passes every filter (the cursor and the limit aside): the meaning the
    /// backends' SQL implements.
    pub fn matches(&self, r: &HeldRecord) -> bool {
        let listed = match self.listing {
            Listing::Pending => r.state == State::Pending,
            Listing::History => r.state != State::Pending,
        };
        listed
            && self.agent.as_deref().is_none_or(|a| {
                r.call.agent.profile == a || r.call.agent.subagent.as_deref() == Some(a)
            })
            && self.tool.as_deref().is_none_or(|t| r.call.tool == t)
            && self
                .server
                .as_deref()
                .is_none_or(|s| r.call.identities.iter().any(|i| i.source() == s))
            && self
                .session
                .as_deref()
                .is_none_or(|s| r.call.turn.as_ref().is_some_and(|t| t.session == s))
            && self
                .reason_source
                .as_deref()
                .is_none_or(|k| r.call.reasons.iter().any(|a| a.source.kind() == k))
            && self.held_before.is_none_or(|t| r.call.created_at <= t)
            && self.held_after.is_none_or(|t| r.call.created_at >= t)
            && self
                .text_lower()
                .is_none_or(|t| r.call.input_json.to_ascii_lowercase().contains(t.as_str()))
            && self.visible_to.as_ref().is_none_or(|v| v.sees(r))
    }

    /// Whether `r` comes after the cursor in this query's order (always, without one).
    pub fn is_after_cursor(&self, r: &HeldRecord) -> bool {
        let Some(c) = &self.after else {
            return true;
        };
        let key = (r.call.created_at, r.id());
        let at = (c.created_at, c.id.as_str());
        match self.order {
            Order::OldestFirst => key > at,
            Order::NewestFirst => key < at,
        }
    }

    /// One page of `all` (any order) as this query selects it: the provided
    /// [`HeldCalls::query_held`](crate::HeldCalls::query_held)'s work, in memory.
    pub fn page_of(&self, all: Vec<HeldRecord>) -> HeldPage {
        let mut records: Vec<HeldRecord> = all
            .into_iter()
            .filter(|r| self.matches(r) && self.is_after_cursor(r))
            .collect();
        records.sort_by(|a, b| (a.call.created_at, a.id()).cmp(&(b.call.created_at, b.id())));
        if self.order == Order::NewestFirst {
            records.reverse();
        }
        HeldPage::cut(records, self.page_size())
    }
}

/// One page of held calls, and the cursor of the next page when there is one.
#[derive(Debug, Clone)]
pub struct HeldPage {
    /// The calls, in the query's order.
    pub records: Vec<HeldRecord>,
    /// Where the next page starts (`None`: this is the last).
    pub next: Option<HeldCursor>,
}

impl HeldPage {
    /// `records` (in order, at most `size + 1` needed) cut to `size`, with the next page's
    /// cursor when there were more.
    pub fn cut(mut records: Vec<HeldRecord>, size: usize) -> Self {
        let more = records.len() > size;
        records.truncate(size);
        let next = if more {
            records.last().map(HeldCursor::after)
        } else {
            None
        };
        Self { records, next }
    }
}
