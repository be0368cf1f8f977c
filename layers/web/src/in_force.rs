//! The approvers in force (revocation without restart; approval-page.md): the people, their
//! sign-in tokens and the groups' rights can be replaced while the page runs — `toolgate
//! serve` replaces them on SIGHUP — and every request reads the ones in force: a sign-in
//! with a token no longer listed is refused, and so is every page request of a session
//! signed in with it; a person or group removed loses their rights at once.

use std::sync::{Arc, RwLock};

use toolgate_engine::approvers::ApproverSettings;
use toolgate_engine::{ConfigErrors, Governance};

use crate::access::PageAccess;

/// The `approvers` people and groups in force, replaceable while the page runs. Cheap to
/// clone: clones share the one in force. Set by [`crate::WebSettings::new`] from its
/// `approvers`; keep a clone to replace them later with [`ApproversInForce::replace`].
///
/// ```
/// use toolgate_engine::config::{Format, load_str};
/// use toolgate_web::WebSettings;
/// let (hash, bobs) = (toolgate_web::hash_token("alice-token"), toolgate_web::hash_token("bob-token"));
/// let gov = |people: &str| load_str(&format!(r#"{{"approvers": {{"people": [{people}]}}}}"#), Format::Json).unwrap();
/// let both = gov(&format!(r#"{{"name": "alice", "token_sha256": "{hash}"}}, {{"name": "bob", "token_sha256": "{bobs}"}}"#));
/// let settings = WebSettings::from_governance(&both, "toolgate.json".as_ref()).unwrap();
/// let in_force = settings.in_force.clone();
/// assert_eq!(in_force.get().people.len(), 2);
/// // On SIGHUP: the configuration read again, bob removed.
/// let alice = gov(&format!(r#"{{"name": "alice", "token_sha256": "{hash}"}}"#));
/// in_force.replace(alice.approver_settings().unwrap().clone()).unwrap();
/// assert_eq!(in_force.get().people.len(), 1);
/// // A change of how people sign in needs a restart: refused, the ones in force kept.
/// let proxied = load_str(r#"{"approvers": {"auth": "proxy_header", "header": "X-User", "people": [{"name": "alice"}]}}"#, Format::Json).unwrap();
/// assert!(in_force.replace(proxied.approver_settings().unwrap().clone()).is_err());
/// assert_eq!(in_force.get().people.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct ApproversInForce(Arc<RwLock<Arc<InForce>>>);

/// Why the approvers in force were kept ([`ApproversInForce::replace`],
/// [`ApproversInForce::replace_configuration`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotReplaced {
    /// How people sign in changed: that takes a restart.
    #[error(
        "`approvers.auth` (or its `header` or `jwt` settings) changed: that takes a restart of `toolgate serve`; the approvers in force are kept"
    )]
    AuthChanged,
    /// The configuration read again has no `approvers`.
    #[error(
        "the configuration has no `approvers` section any more; the approvers in force are kept"
    )]
    NoApprovers,
    /// The page's own fields (`approvers.api_keys`, `approvers.slack`, the verification
    /// settings of `approvers.jwt`) do not read.
    #[error("{0}\nthe approvers in force are kept")]
    Page(ConfigErrors),
}

/// One snapshot of what a reload replaces: the approvers (people, groups, management keys,
/// Slack's user mapping) and the configuration grants and edits are judged against, swapped
/// whole so that one request reads one of them.
#[derive(Debug)]
struct InForce {
    approvers: Arc<ApproverSettings>,
    access: Arc<PageAccess>,
    governance: Option<Arc<Governance>>,
}

impl ApproversInForce {
    /// `approvers` in force, with the page's access settings read from them.
    ///
    /// # Errors
    ///
    /// The page's fields (`approvers.api_keys`, `approvers.slack`, the verification
    /// settings of `approvers.jwt`) that do not read, each named by its path.
    pub fn new(approvers: ApproverSettings) -> Result<Self, ConfigErrors> {
        let access = PageAccess::read(&approvers)?;
        Ok(Self(Arc::new(RwLock::new(Arc::new(InForce {
            approvers: Arc::new(approvers),
            access: Arc::new(access),
            governance: None,
        })))))
    }

    fn snapshot(&self) -> Arc<InForce> {
        Arc::clone(
            &self
                .0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The approvers in force now.
    pub fn get(&self) -> Arc<ApproverSettings> {
        Arc::clone(&self.snapshot().approvers)
    }

    /// The configuration in force now, that grants, revocations and edits are checked
    /// against (R45: its tools and every approver's rights over them); `None`: none given.
    pub fn governance(&self) -> Option<Arc<Governance>> {
        self.snapshot().governance.clone()
    }

    /// The approvers in force and the page's access settings (management keys, Slack's
    /// users) read from them, together: one snapshot.
    pub fn with_access(&self) -> (Arc<ApproverSettings>, Arc<PageAccess>) {
        let s = self.snapshot();
        (Arc::clone(&s.approvers), Arc::clone(&s.access))
    }

    /// Both, read together: one snapshot.
    pub fn both(&self) -> (Arc<ApproverSettings>, Option<Arc<Governance>>) {
        let s = self.snapshot();
        (Arc::clone(&s.approvers), s.governance.clone())
    }

    /// Makes `approvers`' people and groups the ones in force, from the next request on
    /// (the configuration in force is kept).
    ///
    /// # Errors
    ///
    /// A change of how people sign in (`approvers.auth`, its header or its `jwt`
    /// settings): that takes a restart; or page fields that do not read. Either way the
    /// approvers in force are kept.
    pub fn replace(&self, approvers: ApproverSettings) -> Result<(), NotReplaced> {
        let governance = self.governance();
        self.swap(approvers, governance)
    }

    /// Makes a configuration read again the one in force, whole: its `approvers` — people,
    /// groups, management keys, Slack's users — and the configuration itself, for grants
    /// and edits. From the next request, callback and stream event on.
    ///
    /// # Errors
    ///
    /// A configuration without `approvers`, one that changes how people sign in (that
    /// takes a restart), or one whose page fields do not read: what is in force is kept.
    pub fn replace_configuration(&self, governance: Arc<Governance>) -> Result<(), NotReplaced> {
        let Some(approvers) = governance.approver_settings().cloned() else {
            return Err(NotReplaced::NoApprovers);
        };
        self.swap(approvers, Some(governance))
    }

    /// Sets the configuration when none is in force yet (the page's start).
    pub(crate) fn adopt(&self, governance: Option<Arc<Governance>>) {
        let mut slot = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.governance.is_none() && governance.is_some() {
            *slot = Arc::new(InForce {
                approvers: Arc::clone(&slot.approvers),
                access: Arc::clone(&slot.access),
                governance,
            });
        }
    }

    fn swap(
        &self,
        approvers: ApproverSettings,
        governance: Option<Arc<Governance>>,
    ) -> Result<(), NotReplaced> {
        // Fields that do not read first, with their paths: bad `approvers.jwt` settings are
        // reported as such, not only as a change of how people sign in.
        let access = PageAccess::read(&approvers).map_err(NotReplaced::Page)?;
        let mut slot = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.approvers.auth != approvers.auth {
            return Err(NotReplaced::AuthChanged);
        }
        *slot = Arc::new(InForce {
            approvers: Arc::new(approvers),
            access: Arc::new(access),
            governance,
        });
        Ok(())
    }
}
