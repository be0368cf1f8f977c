//! `*` patterns (R19): `*` matches any run of characters (also none), every other character
//! is literal, the pattern matches the whole name, ASCII case-insensitively (R2).

/// A compiled `*` pattern.
///
/// ```
/// use toolgate_engine::policy::Glob;
/// let g = Glob::new("refund_*");
/// assert!(g.matches("refund_order"));
/// assert!(g.matches("REFUND_"));
/// assert!(!g.matches("partial_refund"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    /// The pattern as written.
    source: Box<str>,
    /// The pattern ASCII-lower-cased, stars kept; `None` when that is `source` itself (one
    /// string per pattern in the common case, to keep the memory per rule small).
    lower: Option<Box<str>>,
    /// Where its first and last `*` are (byte offsets), found once here rather than on
    /// every match (quotas are matched on every call).
    stars: Stars,
}

/// The stars of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stars {
    /// No `*`: the pattern is an exact name.
    None,
    /// The byte offsets of the first and the last `*` (equal when there is one).
    At(u32, u32),
    /// Stars past offset `u32::MAX` (no configuration gets near): found at match time.
    Far,
}

impl Glob {
    /// Compiles a pattern. Every string is a valid pattern.
    pub fn new(pattern: &str) -> Self {
        let lower = pattern.to_ascii_lowercase();
        let stars = match (pattern.find('*'), pattern.rfind('*')) {
            (Some(first), Some(last)) => match (u32::try_from(first), u32::try_from(last)) {
                (Ok(first), Ok(last)) => Stars::At(first, last),
                _ => Stars::Far,
            },
            _ => Stars::None,
        };
        Self {
            source: pattern.into(),
            lower: (lower != pattern).then(|| lower.into_boxed_str()),
            stars,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The pattern lower-cased.
    fn lower(&self) -> &str {
        self.lower.as_deref().unwrap_or(&self.source)
    }

    /// The exact (lower-cased) name when the pattern has no `*`.
    pub fn exact(&self) -> Option<&str> {
        match self.stars {
            Stars::None => Some(self.lower()),
            _ => None,
        }
    }

    /// The pattern's literal parts: before the first star, between the first and the last
    /// (stars kept), after the last; `None` without a star.
    fn parts(&self) -> Option<(&str, &str, &str)> {
        let lower = self.lower();
        let (first, last) = match self.stars {
            Stars::None => return None,
            Stars::At(first, last) => (first as usize, last as usize),
            Stars::Far => (lower.find('*')?, lower.rfind('*')?),
        };
        // ASCII lower-casing keeps every byte offset, so the offsets found in the pattern
        // hold in its lower-cased form; `get` keeps this total all the same.
        let prefix = lower.get(..first)?;
        let middle = lower.get(first + 1..last.max(first + 1)).unwrap_or("");
        let suffix = lower.get(last + 1..)?;
        Some((prefix, middle, suffix))
    }

    /// The literal prefix before the first `*` (lower-cased), when the pattern has a star.
    pub fn prefix(&self) -> Option<&str> {
        self.parts().map(|(prefix, _, _)| prefix)
    }

    /// The literal suffix after the last `*` (lower-cased), when the pattern has a star.
    pub fn suffix(&self) -> Option<&str> {
        self.parts().map(|(_, _, suffix)| suffix)
    }

    /// Whether every name `inner` (a pattern too) can match is one this pattern matches,
    /// decided conservatively without enumerating names: this pattern is `*`, or the same
    /// pattern (ASCII case-insensitively), or `inner` is an exact name this pattern matches.
    /// `false` may mean "not provably": callers treat it as "not covered".
    ///
    /// ```
    /// use toolgate_engine::policy::Glob;
    /// assert!(Glob::new("*").covers(&Glob::new("triage-*")));
    /// assert!(Glob::new("triage-*").covers(&Glob::new("Triage-*")));
    /// assert!(Glob::new("triage-*").covers(&Glob::new("triage-7")));
    /// assert!(!Glob::new("support").covers(&Glob::new("triage-*")));
    /// ```
    pub fn covers(&self, inner: &Glob) -> bool {
        self.as_str() == "*"
            || inner.lower() == self.lower()
            || (inner.exact().is_some() && self.matches_lower(inner.lower()))
    }

    /// Whether the pattern matches the whole of `name`, ASCII case-insensitively.
    pub fn matches(&self, name: &str) -> bool {
        self.matches_lower(&name.to_ascii_lowercase())
    }

    /// As [`Glob::matches`] for a name already ASCII-lower-cased. Linear in the name's
    /// length times the number of stars; no backtracking.
    pub fn matches_lower(&self, name: &str) -> bool {
        let Some((first, middle, last)) = self.parts() else {
            return name == self.lower();
        };
        if name.len() < first.len() + last.len() {
            return false;
        }
        if !name.starts_with(first) || !name.ends_with(last) {
            return false;
        }
        // The window between the prefix and the suffix; middle parts are found leftmost,
        // in order, which is exact for patterns whose only wildcard is `*`.
        let end = name.len() - last.len();
        let Some(mut window) = name.get(first.len()..end) else {
            return false;
        };
        for part in middle.split('*') {
            if part.is_empty() {
                continue;
            }
            match window.find(part) {
                Some(at) => match window.get(at + part.len()..) {
                    Some(rest) => window = rest,
                    None => return false,
                },
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r19_whole_name() {
        let g = Glob::new("refund_*");
        assert!(g.matches("refund_order"));
        assert!(g.matches("refund_"));
        assert!(!g.matches("partial_refund"));
        assert!(!g.matches("xrefund_order"));
    }

    #[test]
    fn r19_star_matches_none_and_any() {
        assert!(Glob::new("*").matches(""));
        assert!(Glob::new("*").matches("anything"));
        assert!(Glob::new("a*b*c").matches("abc"));
        assert!(Glob::new("a*b*c").matches("aXXbYYc"));
        assert!(!Glob::new("a*b*c").matches("acb"));
        assert!(Glob::new("**").matches("x"));
        assert!(
            !Glob::new("ab*ba").matches("aba"),
            "prefix and suffix may not overlap"
        );
        assert!(Glob::new("ab*ba").matches("abba"));
    }

    #[test]
    fn r19_other_characters_are_literal() {
        assert!(Glob::new("a.c").matches("a.c"));
        assert!(!Glob::new("a.c").matches("abc"));
        assert!(!Glob::new("a?c").matches("abc"));
        assert!(Glob::new("[x]").matches("[X]"));
    }

    #[test]
    fn r2_case_insensitive() {
        assert!(Glob::new("Create_*").matches("CREATE_ISSUE"));
        assert!(Glob::new("github").matches("GitHub"));
    }

    #[test]
    fn exact_prefix_suffix() {
        assert_eq!(Glob::new("Abc").exact(), Some("abc"));
        assert_eq!(Glob::new("ab*").exact(), None);
        assert_eq!(Glob::new("ab*").prefix(), Some("ab"));
        assert_eq!(Glob::new("*yz").suffix(), Some("yz"));
        assert_eq!(Glob::new("*yz").prefix(), Some(""));
    }

    /// R19 read straight: `*` matches any run of characters, by backtracking over chars.
    fn reference(pattern: &[char], name: &[char]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some(('*', rest)) => (0..=name.len()).any(|k| reference(rest, &name[k..])),
            Some((c, rest)) => name
                .split_first()
                .is_some_and(|(n, tail)| n.eq_ignore_ascii_case(c) && reference(rest, tail)),
        }
    }

    proptest::proptest! {
        /// The compiled matcher (stars found once, at `new`) agrees with the reading of R19.
        #[test]
        fn r19_compiled_matches_agree_with_the_reference(
            pattern in "[ab*Aé]{0,8}",
            name in "[abAé]{0,10}",
        ) {
            let p: Vec<char> = pattern.chars().collect();
            let n: Vec<char> = name.chars().collect();
            proptest::prop_assert_eq!(Glob::new(&pattern).matches(&name), reference(&p, &n));
        }
    }
}
