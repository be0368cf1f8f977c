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
    /// string per pattern in the common case: issue 12, memory per rule).
    lower: Option<Box<str>>,
    /// Whether the pattern holds a `*` at all.
    has_star: bool,
}

impl Glob {
    /// Compiles a pattern. Every string is a valid pattern.
    pub fn new(pattern: &str) -> Self {
        let lower = pattern.to_ascii_lowercase();
        Self {
            source: pattern.into(),
            lower: (lower != pattern).then(|| lower.into_boxed_str()),
            has_star: pattern.contains('*'),
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
        if self.has_star {
            None
        } else {
            Some(self.lower())
        }
    }

    /// The literal prefix before the first `*` (lower-cased), when the pattern has a star.
    pub fn prefix(&self) -> Option<&str> {
        if !self.has_star {
            return None;
        }
        self.lower().split('*').next()
    }

    /// The literal suffix after the last `*` (lower-cased), when the pattern has a star.
    pub fn suffix(&self) -> Option<&str> {
        if !self.has_star {
            return None;
        }
        self.lower().rsplit('*').next()
    }

    /// Whether the pattern matches the whole of `name`, ASCII case-insensitively.
    pub fn matches(&self, name: &str) -> bool {
        self.matches_lower(&name.to_ascii_lowercase())
    }

    /// As [`Glob::matches`] for a name already ASCII-lower-cased. Linear in the name's
    /// length times the number of stars; no backtracking.
    pub fn matches_lower(&self, name: &str) -> bool {
        let lower = self.lower();
        let Some((first, rest)) = lower.split_once('*').filter(|_| self.has_star) else {
            return name == lower;
        };
        // `rest` holds the middle parts and the suffix, split by the remaining stars.
        let (middle, last) = rest.rsplit_once('*').unwrap_or(("", rest));
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
}
