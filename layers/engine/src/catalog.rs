//! The catalog: tools registered in arrival order with their source (R2, R24, R29).
//!
//! Each qualified name is one [`Entry`]; an entry holds one [`Record`] per distinct tool
//! identity behind that name. A later declaration of the same identity is a revision and
//! replaces the record (a source revising its own tool is believed, R29); a declaration of
//! a different identity with an equal name is a collision (R24).
//!
//! One catalog (R52): the configuration's declarations and the tools an MCP server lists at
//! run time are records of the same tools. A listing ([`Catalog::register_listed`]) revises
//! what the server states (description, input schema, annotations) and never the
//! operator's settings ([`OperatorSettings`]), which stay in force over every listing.

use std::collections::HashMap;
use std::sync::Arc;

use toolgate_core::names::{NameError, lower_key, name_key};
use toolgate_core::{ApprovalMode, NetworkScope, ToolDeclaration, ToolIdentity, ToolKind};

/// What the behaviour posture says about one record (R27–R31).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostureStatus {
    /// Exempt, and why.
    Exempt(String),
    /// Gated, and why.
    Gated(String),
}

impl PostureStatus {
    /// Whether the record is gated.
    pub fn is_gated(&self) -> bool {
        matches!(self, PostureStatus::Gated(_))
    }
}

/// What the operator's configuration says about one tool, apart from what its source states
/// (R52): kept in force over every listing of the tool by its MCP server.
///
/// ```
/// use toolgate_core::{ApprovalMode, ToolDeclaration, ToolIdentity};
/// use toolgate_engine::catalog::OperatorSettings;
/// let configured = ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")).approval(ApprovalMode::Deny);
/// let listed = ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")).description("Wipes");
/// let effective = OperatorSettings::of(&configured).apply(listed);
/// assert_eq!(effective.approval, ApprovalMode::Deny);
/// assert_eq!(effective.description.as_deref(), Some("Wipes"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorSettings {
    approval: toolgate_core::ApprovalMode,
    confidential: bool,
    network: NetworkScope,
    network_override: Option<NetworkScope>,
    target: Option<toolgate_core::TargetSpec>,
    labels: Vec<String>,
}

impl OperatorSettings {
    /// The operator's settings a configured declaration carries.
    pub fn of(decl: &ToolDeclaration) -> Self {
        Self {
            approval: decl.approval,
            confidential: decl.confidential,
            network: decl.network,
            network_override: decl.network_override,
            target: decl.target.clone(),
            labels: decl.labels.clone(),
        }
    }

    /// `listed` (what the server states now) with these settings in force: the approval
    /// mode and the network scopes strictest-wins with whatever the listing's own host
    /// settings say (a server entry's settings are the operator's too), confidential if
    /// either says so, the configured execution target unless there is none. Idempotent.
    pub fn apply(&self, mut listed: ToolDeclaration) -> ToolDeclaration {
        listed.approval = listed.approval.stricter(self.approval);
        listed.confidential |= self.confidential;
        listed.network = listed.network.max(self.network);
        listed.network_override = match (self.network_override, listed.network_override) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if self.target.is_some() {
            listed.target.clone_from(&self.target);
        }
        // R49, R52: labels are the operator's word, never the listing's.
        for l in &self.labels {
            if !listed.labels.contains(l) {
                listed.labels.push(l.clone());
            }
        }
        listed
    }
}

/// One tool identity behind a qualified name, with its latest declaration.
#[derive(Debug, Clone)]
pub struct Record {
    /// The latest declaration from this source (for a listed MCP tool the configuration
    /// also declares: the listing with the operator's settings in force, R52).
    pub decl: ToolDeclaration,
    /// The operator's settings, when the configuration declares this identity (R52).
    pub operator: Option<OperatorSettings>,
    /// The position (in arrival order) of the first declaration of this identity.
    pub first_position: usize,
    /// The position of the latest revision.
    pub position: usize,
    /// What the posture says (computed when the governance snapshot is built).
    pub posture: PostureStatus,
}

impl Record {
    /// The record's identity.
    pub fn identity(&self) -> &ToolIdentity {
        &self.decl.identity
    }
}

/// One qualified name and the records behind it, with each aspect combined strictest-wins
/// (R24).
#[derive(Debug, Clone)]
pub struct Entry {
    /// The qualified name, spelled as the first record spelled it (R24).
    pub name: String,
    /// The ASCII-lower-cased name, the look-up key (R2).
    pub key: String,
    /// The records, in arrival order.
    pub records: Vec<Record>,
    /// The strictest declared approval mode.
    pub declared_mode: ApprovalMode,
    /// The strictest effective network scope (`egress` wins).
    pub network: NetworkScope,
    /// Withheld from confidential work if any record is.
    pub confidential: bool,
    /// Not governed (R42): only when every record behind the name says `governed: false`.
    pub ungoverned: bool,
    /// The name and description as shared text, so an exposure copies no string.
    pub(crate) shared: SharedText,
}

/// An entry's name and description shared with every exposure that lists it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedText {
    pub(crate) name: Arc<str>,
    pub(crate) description: Option<Arc<str>>,
}

impl Entry {
    /// Whether any record is of a kind the tenant policy governs by default (mcp, http).
    pub fn has_policy_kind(&self) -> bool {
        self.records
            .iter()
            .any(|r| matches!(r.identity().kind(), ToolKind::Mcp | ToolKind::Http))
    }

    /// Whether the posture gates this tool: one non-exempt record gates it (R24, R29).
    pub fn posture_gated(&self) -> Option<&str> {
        self.records.iter().find_map(|r| match &r.posture {
            PostureStatus::Gated(why) => Some(why.as_str()),
            PostureStatus::Exempt(_) => None,
        })
    }

    /// Whether two or more identities share this name (R24).
    pub fn is_collision(&self) -> bool {
        self.records.len() > 1
    }

    /// A description for tool search: the first record's that has one.
    pub fn description(&self) -> Option<&str> {
        self.records
            .iter()
            .find_map(|r| r.decl.description.as_deref())
    }

    pub(crate) fn recombine(&mut self) {
        self.declared_mode = self
            .records
            .iter()
            .map(|r| r.decl.approval)
            .reduce(ApprovalMode::stricter)
            .unwrap_or(ApprovalMode::Default);
        self.network = self
            .records
            .iter()
            .map(|r| r.decl.effective_network())
            .max()
            .unwrap_or(NetworkScope::None);
        self.confidential = self.records.iter().any(|r| r.decl.confidential);
        self.ungoverned = self.records.iter().all(|r| !r.decl.governed);
        // A revision may change the description: written again, once per registration.
        let description = self.description();
        if self.shared.description.as_deref() != description {
            self.shared.description = description.map(Arc::from);
        }
        if *self.shared.name != *self.name {
            self.shared.name = Arc::from(self.name.as_str());
        }
    }
}

/// How a declaration entered the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// A new qualified name.
    New,
    /// A revision of a known identity (R29: believed).
    Revision,
    /// A new identity under an existing name (R24).
    Collision,
}

/// Tools in arrival order, looked up case-insensitively by qualified name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: Vec<Entry>,
    by_key: HashMap<String, usize, foldhash::fast::RandomState>,
    arrivals: usize,
    /// Entry indices sorted by look-up key, set by [`Catalog::seal`].
    sorted: Vec<usize>,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a declaration of the configuration (arrival order matters, R29). A
    /// later configured declaration of the same identity replaces the record, the
    /// operator's settings included.
    pub fn register(&mut self, decl: ToolDeclaration) -> Result<Registered, NameError> {
        self.insert(decl, false)
    }

    /// Registers a tool as its MCP server lists it now (R29, R52): a revision of what the
    /// server states. Where the configuration declares the same identity, its
    /// [`OperatorSettings`] stay in force over the listing.
    ///
    /// ```
    /// use toolgate_core::{ApprovalMode, ToolDeclaration, ToolIdentity};
    /// use toolgate_engine::catalog::Catalog;
    /// let mut c = Catalog::new();
    /// c.register(ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")).approval(ApprovalMode::Deny))
    ///     .unwrap();
    /// c.register_listed(ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe"))).unwrap();
    /// assert_eq!(c.get("bank__wipe").unwrap().declared_mode, ApprovalMode::Deny);
    /// ```
    pub fn register_listed(&mut self, decl: ToolDeclaration) -> Result<Registered, NameError> {
        self.insert(decl, true)
    }

    fn insert(&mut self, decl: ToolDeclaration, listed: bool) -> Result<Registered, NameError> {
        let name = decl.identity.qualified_name()?;
        let key = name_key(&name);
        let position = self.arrivals;
        self.arrivals += 1;
        let posture = PostureStatus::Gated(String::from("not yet evaluated"));
        let operator = (!listed).then(|| OperatorSettings::of(&decl));
        let Some(&at) = self.by_key.get(&key) else {
            let mut entry = Entry {
                name,
                key: key.clone(),
                records: vec![Record {
                    decl,
                    operator,
                    first_position: position,
                    position,
                    posture,
                }],
                declared_mode: ApprovalMode::Default,
                network: NetworkScope::None,
                confidential: false,
                ungoverned: false,
                shared: SharedText::default(),
            };
            entry.recombine();
            self.by_key.insert(key, self.entries.len());
            self.entries.push(entry);
            self.sorted.clear();
            return Ok(Registered::New);
        };
        let Some(entry) = self.entries.get_mut(at) else {
            return Ok(Registered::New);
        };
        let kind = if let Some(rec) = entry
            .records
            .iter_mut()
            .find(|r| r.decl.identity.same_identity(&decl.identity))
        {
            match (&rec.operator, listed) {
                (Some(op), true) => rec.decl = op.apply(decl),
                (_, true) => rec.decl = decl,
                (_, false) => {
                    rec.operator = operator;
                    rec.decl = decl;
                }
            }
            rec.position = position;
            Registered::Revision
        } else {
            entry.records.push(Record {
                decl,
                operator,
                first_position: position,
                position,
                posture,
            });
            Registered::Collision
        };
        entry.recombine();
        Ok(kind)
    }

    /// The entries, in order of first arrival.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Fixes the order [`Catalog::sorted`] walks (the snapshot does this once when built).
    pub(crate) fn seal(&mut self) {
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_by(|&a, &b| {
            let key = |i: usize| self.entries.get(i).map(|e| e.key.as_str());
            key(a).cmp(&key(b))
        });
        self.sorted = order;
    }

    /// The entries sorted by their ASCII-lower-cased name (the order of `expose`'s lists).
    pub fn sorted(&self) -> impl Iterator<Item = &Entry> {
        let sealed = self.sorted.len() == self.entries.len();
        let mut fallback: Vec<&Entry> = Vec::new();
        if !sealed {
            fallback = self.entries.iter().collect();
            fallback.sort_by(|a, b| a.key.cmp(&b.key));
        }
        let sealed_iter = self
            .sorted
            .iter()
            .filter(move |_| sealed)
            .filter_map(|&i| self.entries.get(i));
        sealed_iter.chain(fallback)
    }

    pub(crate) fn entries_mut(&mut self) -> &mut [Entry] {
        &mut self.entries
    }

    /// The position of one of this catalog's entries in [`Catalog::entries`] (pointer
    /// identity: O(1)); none for an entry of another catalog.
    pub fn index_of(&self, entry: &Entry) -> Option<usize> {
        let base = self.entries.as_ptr() as usize;
        let at = (entry as *const Entry as usize).checked_sub(base)?
            / std::mem::size_of::<Entry>().max(1);
        self.entries
            .get(at)
            .filter(|e| std::ptr::eq(*e, entry))
            .map(|_| at)
    }

    /// The entry for a qualified name, case-insensitively (R2).
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.by_key
            .get(lower_key(name).as_ref())
            .and_then(|&i| self.entries.get(i))
    }

    /// The entry holding a record of exactly this identity (kind and source, names compared
    /// case-insensitively).
    pub fn get_identity(&self, identity: &ToolIdentity) -> Option<&Entry> {
        let name = identity.qualified_name().ok()?;
        let entry = self.get(&name)?;
        entry
            .records
            .iter()
            .any(|r| {
                let id = r.identity();
                id.kind() == identity.kind()
                    && id.source().eq_ignore_ascii_case(identity.source())
                    && id.name().eq_ignore_ascii_case(identity.name())
            })
            .then_some(entry)
    }

    /// The number of qualified names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::McpAnnotations;

    #[test]
    fn r24_collisions_combine_strictest() {
        let mut c = Catalog::new();
        assert_eq!(
            c.register(
                ToolDeclaration::new(ToolIdentity::toolset("github", "create_issue"))
                    .approval(ApprovalMode::RequireApproval)
            )
            .unwrap(),
            Registered::New
        );
        assert_eq!(
            c.register(
                ToolDeclaration::new(ToolIdentity::mcp("GitHub", "create.issue"))
                    .confidential(true)
            )
            .unwrap(),
            Registered::Collision
        );
        let e = c.get("GITHUB__create_issue").unwrap();
        assert_eq!(
            e.name, "github__create_issue",
            "the first record's spelling"
        );
        assert_eq!(e.declared_mode, ApprovalMode::RequireApproval);
        assert_eq!(
            e.network,
            NetworkScope::Egress,
            "the MCP record is open-world"
        );
        assert!(e.confidential);
        assert!(e.is_collision());
    }

    #[test]
    fn r29_revision_replaces_in_both_directions() {
        let mut c = Catalog::new();
        let ro = |v: bool| {
            ToolDeclaration::new(ToolIdentity::mcp("kb", "page")).annotations(McpAnnotations {
                read_only_hint: Some(v),
                ..Default::default()
            })
        };
        c.register(ro(true)).unwrap();
        assert_eq!(c.register(ro(false)).unwrap(), Registered::Revision);
        let e = c.get("kb__page").unwrap();
        assert_eq!(e.records.len(), 1);
        assert_eq!(
            e.records[0]
                .decl
                .annotations
                .as_ref()
                .unwrap()
                .read_only_hint,
            Some(false)
        );
        c.register(ro(true)).unwrap();
        assert_eq!(
            c.get("kb__page").unwrap().records[0]
                .decl
                .annotations
                .as_ref()
                .unwrap()
                .read_only_hint,
            Some(true)
        );
    }

    #[test]
    fn r52_a_listing_revises_what_the_server_states_and_never_the_operators_settings() {
        use toolgate_core::TargetSpec;
        let mut c = Catalog::new();
        let target = TargetSpec::default();
        let mut configured = ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe"))
            .approval(ApprovalMode::Deny)
            .confidential(true)
            .network_override(NetworkScope::None)
            .description("declared");
        configured.target = Some(target.clone());
        c.register(configured).unwrap();
        let listed = |d: &str| {
            ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe"))
                .description(d)
                .annotations(McpAnnotations {
                    read_only_hint: Some(true),
                    ..Default::default()
                })
        };
        for round in ["first listing", "listed again"] {
            assert_eq!(
                c.register_listed(listed(round)).unwrap(),
                Registered::Revision
            );
            let e = c.get("bank__wipe").unwrap();
            assert_eq!(e.records.len(), 1);
            let d = &e.records[0].decl;
            assert_eq!(d.description.as_deref(), Some(round), "the server's word");
            assert!(d.annotations.is_some(), "the server's word");
            assert_eq!(e.declared_mode, ApprovalMode::Deny, "{round}");
            assert!(e.confidential, "{round}");
            assert_eq!(e.network, NetworkScope::None, "{round}");
            assert_eq!(d.target.as_ref(), Some(&target), "{round}");
        }
        // A listing never loosens what the server entry itself says either: the stricter
        // of the two operator settings holds.
        c.register_listed(listed("x").approval(ApprovalMode::RequireApproval))
            .unwrap();
        assert_eq!(
            c.get("bank__wipe").unwrap().declared_mode,
            ApprovalMode::Deny
        );
        // A configured revision replaces the operator's settings (R29).
        c.register(ToolDeclaration::new(ToolIdentity::mcp("bank", "wipe")))
            .unwrap();
        c.register_listed(listed("y")).unwrap();
        let e = c.get("bank__wipe").unwrap();
        assert_eq!(e.declared_mode, ApprovalMode::Default);
        assert!(!e.confidential);
        // A tool no configuration declares is the server's alone: each listing replaces it.
        let mut d = Catalog::new();
        d.register_listed(listed("a").approval(ApprovalMode::RequireApproval))
            .unwrap();
        d.register_listed(listed("b")).unwrap();
        assert_eq!(
            d.get("bank__wipe").unwrap().declared_mode,
            ApprovalMode::Default
        );
        assert!(d.get("bank__wipe").unwrap().records[0].operator.is_none());
    }

    #[test]
    fn r2_identity_lookup_checks_kind_and_source() {
        let mut c = Catalog::new();
        c.register(ToolDeclaration::new(ToolIdentity::mcp(
            "GitHub Enterprise",
            "list.issues",
        )))
        .unwrap();
        assert!(
            c.get_identity(&ToolIdentity::mcp("github enterprise", "list.issues"))
                .is_some()
        );
        assert!(
            c.get_identity(&ToolIdentity::toolset("GitHub Enterprise", "list.issues"))
                .is_none()
        );
        assert!(
            c.get_identity(&ToolIdentity::mcp("GitHub Enterprise", "list_issues"))
                .is_none()
        );
    }
}
