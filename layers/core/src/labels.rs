//! Labels (R49) as the records carry them: a sorted set, shared by reference. What a label
//! may be, and how a tool and a session come to carry one, is the engine's
//! (`toolgate_engine::labels`).

/// A set of labels, sorted, each once. Cloned by reference (a session's labels are handed
/// to every decision in it): adding a label makes a new list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSet(Option<std::sync::Arc<[Box<str>]>>);

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
            Self(Some(all.into()))
        }
    }

    fn slice(&self) -> &[Box<str>] {
        self.0.as_deref().unwrap_or(&[])
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
