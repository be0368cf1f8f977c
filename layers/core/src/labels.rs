//! Labels (R49) as the records carry them: a sorted set, shared by reference. What a label
//! may be, and how a tool and a session come to carry one, is the engine's
//! (`toolgate_engine::labels`).

/// A set of labels, sorted, each once. Cloned by reference (a session's labels are handed
/// to every decision in it): adding a label makes a new list.
#[derive(Debug, Clone, Default)]
pub struct LabelSet(Option<std::sync::Arc<Shared>>);

/// The labels of a non-empty set, and their mask under the first numbering that asked for
/// one ([`LabelSet::mask_under`]).
#[derive(Debug)]
struct Shared {
    labels: Box<[Box<str>]>,
    mask: std::sync::OnceLock<(u64, u64)>,
}

impl PartialEq for LabelSet {
    fn eq(&self, other: &Self) -> bool {
        self.slice() == other.slice()
    }
}

impl Eq for LabelSet {}

impl std::hash::Hash for LabelSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.slice().hash(state);
    }
}

/// The empty set, for a call whose labels nobody looked up.
pub static NO_LABELS: LabelSet = LabelSet(None);

impl LabelSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The set of these labels (not validated: `toolgate_engine::labels::check_label` says
    /// what a label may be).
    ///
    /// ```
    /// use toolgate_core::LabelSet;
    /// let set = LabelSet::of(["untrusted", "private", "private"]);
    /// assert_eq!(set.to_vec(), ["private", "untrusted"]);
    /// assert!(set.contains("private") && !set.contains("egress"));
    /// assert_eq!(set.clone(), set);
    /// assert_eq!(LabelSet::of([] as [&str; 0]), LabelSet::new());
    /// ```
    pub fn of<I, S>(labels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut all: Vec<Box<str>> = labels.into_iter().map(|l| l.as_ref().into()).collect();
        all.sort_unstable();
        all.dedup();
        Self::from_sorted(all)
    }

    fn from_sorted(all: Vec<Box<str>>) -> Self {
        if all.is_empty() {
            Self(None)
        } else {
            Self(Some(std::sync::Arc::new(Shared {
                labels: all.into(),
                mask: std::sync::OnceLock::new(),
            })))
        }
    }

    fn slice(&self) -> &[Box<str>] {
        self.0.as_deref().map_or(&[], |s| &s.labels)
    }

    /// The set as a bit mask under one numbering of labels, `numbering` any id unique to it:
    /// `compute` works it out the first time a numbering asks, and the set (and every clone
    /// of it) keeps it for that numbering; another numbering computes it each time. The
    /// empty set is `0` without asking. A decision turns a tool's and a session's labels
    /// into masks this way once per set, not once per call (R49).
    ///
    /// ```
    /// use toolgate_core::LabelSet;
    /// let set = LabelSet::of(["private", "egress"]);
    /// let bits = |s: &LabelSet| s.iter().fold(0, |m, l| m | if l == "private" { 1 } else { 2 });
    /// assert_eq!(set.mask_under(7, bits), 3);
    /// assert_eq!(set.clone().mask_under(7, |_| unreachable!("kept")), 3);
    /// assert_eq!(set.mask_under(8, |_| 1), 1, "another numbering computes its own");
    /// assert_eq!(LabelSet::new().mask_under(7, |_| unreachable!("empty")), 0);
    /// ```
    #[inline]
    pub fn mask_under(&self, numbering: u64, compute: impl FnOnce(&Self) -> u64) -> u64 {
        let Some(shared) = &self.0 else {
            return 0;
        };
        match shared.mask.get() {
            Some(&(n, mask)) if n == numbering => mask,
            Some(_) => compute(self),
            None => {
                let mask = compute(self);
                let _ = shared.mask.set((numbering, mask));
                mask
            }
        }
    }

    /// Adds one label.
    pub fn insert(&mut self, label: &str) {
        if let Err(at) = self.slice().binary_search_by(|l| (**l).cmp(label)) {
            let mut all = self.slice().to_vec();
            all.insert(at, label.into());
            *self = Self::from_sorted(all);
        }
    }

    /// Adds every label of `other`.
    pub fn extend(&mut self, other: &LabelSet) {
        if other.slice().iter().all(|l| self.contains(l)) {
            return;
        }
        let mut all: Vec<Box<str>> = self.slice().iter().chain(other.slice()).cloned().collect();
        all.sort_unstable();
        all.dedup();
        *self = Self::from_sorted(all);
    }

    /// Whether the set holds `label`.
    pub fn contains(&self, label: &str) -> bool {
        self.slice().binary_search_by(|l| (**l).cmp(label)).is_ok()
    }

    /// Whether the set holds every one of `labels`.
    pub fn contains_all<I, S>(&self, labels: I) -> bool
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        labels.into_iter().all(|l| self.contains(l.as_ref()))
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.slice().is_empty()
    }

    /// The labels, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.slice().iter().map(|l| &**l)
    }

    /// The labels, sorted, as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }

    /// How many labels the set holds.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// The labels, sorted, joined by `sep`.
    pub fn join(&self, sep: &str) -> String {
        self.slice().join(sep)
    }
}

impl From<&LabelSet> for serde_json::Value {
    /// The labels as a JSON array of strings, sorted.
    fn from(set: &LabelSet) -> Self {
        serde_json::Value::Array(set.iter().map(serde_json::Value::from).collect())
    }
}

impl FromIterator<String> for LabelSet {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        Self::of(iter)
    }
}

impl serde::Serialize for LabelSet {
    /// As a sequence of strings, sorted.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}
