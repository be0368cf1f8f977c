//! The catalog: tools registered in arrival order with their source (R2, R24, R29).
//!
//! Each qualified name is one [`Entry`]; an entry holds one [`Record`] per distinct tool
//! identity behind that name. A later declaration of the same identity is a revision and
//! replaces the record (a source revising its own tool is believed, R29); a declaration of
//! a different identity with an equal name is a collision (R24).

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

/// One tool identity behind a qualified name, with its latest declaration.
#[derive(Debug, Clone)]
pub struct Record {
    /// The latest declaration from this source.
    pub decl: ToolDeclaration,
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
    /// The name and description as shared text, so an exposure copies no string (issue 26).
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

    /// Registers a declaration (arrival order matters, R29).
    pub fn register(&mut self, decl: ToolDeclaration) -> Result<Registered, NameError> {
        let name = decl.identity.qualified_name()?;
        let key = name_key(&name);
        let position = self.arrivals;
        self.arrivals += 1;
        let posture = PostureStatus::Gated(String::from("not yet evaluated"));
        let Some(&at) = self.by_key.get(&key) else {
            let mut entry = Entry {
                name,
                key: key.clone(),
                records: vec![Record {
                    decl,
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
            rec.decl = decl;
            rec.position = position;
            Registered::Revision
        } else {
            entry.records.push(Record {
                decl,
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
