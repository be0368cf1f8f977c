//! The compiled index of a tenant policy: which rules a call could possibly match, found
//! without looking at the others (SPEC R18, R19; the semantics stay those of the plain loop,
//! [`super::Policy::evaluate_naive`]).
//!
//! Each rule goes into exactly one bucket, chosen by the most selective literal it names, in
//! this order: its exact tool name, its tool pattern's literal prefix, its tool pattern's
//! literal suffix, its exact server name, its server pattern's literal prefix; a rule with
//! none of these (server suffix globs, infix patterns, no selector at all) is in `rest` and
//! is a candidate for every call. Exact names are hashed (foldhash: the keys are the
//! operator's own literals, so hash flooding is no concern); prefixes and suffixes are byte
//! tries, walked once along the name (reversed for suffixes), so a look-up costs at most the
//! name's length in small steps, whatever the number of distinct literal lengths.
//!
//! Names compare ASCII case-insensitively (R2, R19): every key is ASCII-lower-cased when it
//! is inserted and every byte of a name when it is walked; other bytes (UTF-8 included)
//! compare as they are. A literal that is a byte prefix (suffix) of a UTF-8 name ends on a
//! character boundary of it, so byte tries and the string comparisons of [`super::Glob`]
//! agree.
//!
//! Because each rule sits in one bucket and each bucket is reached at most once per call,
//! the candidates come out without duplicates, and [`Index::for_each_candidate`] hands them
//! over without collecting them (no sort, no `dedup`, no allocation); policy order, which
//! decides ties between rules of the same effect, is restored by the caller from the few
//! rules that match.

use std::collections::HashMap;

use super::{Glob, Rule};

/// Exact (lower-cased) names to the rules naming them, in policy order.
type ExactMap = HashMap<Box<str>, Vec<usize>, foldhash::fast::RandomState>;

/// Rules bucketed by the most selective literal they name, so a call only looks at rules
/// that could match it.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    by_tool: ExactMap,
    tool_prefix: Trie,
    tool_suffix: Trie,
    by_server: ExactMap,
    server_prefix: Trie,
    rest: Vec<usize>,
}

impl Index {
    /// Buckets every rule (see the module documentation for the order).
    pub(super) fn build<'r>(rules: impl IntoIterator<Item = &'r Rule>) -> Self {
        let mut by_tool = ExactMap::default();
        let mut tool_prefix = TrieBuilder::default();
        let mut tool_suffix = TrieBuilder::default();
        let mut by_server = ExactMap::default();
        let mut server_prefix = TrieBuilder::default();
        let mut rest = Vec::new();
        for (i, rule) in rules.into_iter().enumerate() {
            let tool = rule.tool.as_ref();
            let server = rule.server.as_ref();
            if let Some(exact) = tool.and_then(Glob::exact) {
                push_exact(&mut by_tool, exact, i);
            } else if let Some(p) = tool.and_then(Glob::prefix).filter(|p| !p.is_empty()) {
                tool_prefix.insert(p.bytes(), i);
            } else if let Some(s) = tool.and_then(Glob::suffix).filter(|s| !s.is_empty()) {
                tool_suffix.insert(s.bytes().rev(), i);
            } else if let Some(exact) = server.and_then(Glob::exact) {
                push_exact(&mut by_server, exact, i);
            } else if let Some(p) = server.and_then(Glob::prefix).filter(|p| !p.is_empty()) {
                server_prefix.insert(p.bytes(), i);
            } else {
                rest.push(i);
            }
        }
        by_tool.shrink_to_fit();
        by_server.shrink_to_fit();
        Self {
            by_tool,
            tool_prefix: tool_prefix.finish(),
            tool_suffix: tool_suffix.finish(),
            by_server,
            server_prefix: server_prefix.finish(),
            rest,
        }
    }

    /// Calls `f` with every rule that could match a call to `tool` (on `server`, for MCP
    /// tools), each exactly once, in no particular order. `tool` and `server` are expected
    /// ASCII-lower-cased already for the exact-name look-ups (the tries fold case
    /// themselves).
    pub(super) fn for_each_candidate(
        &self,
        tool: &str,
        server: Option<&str>,
        mut f: impl FnMut(usize),
    ) {
        if let Some(v) = get_exact(&self.by_tool, tool) {
            v.iter().copied().for_each(&mut f);
        }
        self.tool_prefix.walk(tool.bytes(), &mut f);
        self.tool_suffix.walk(tool.bytes().rev(), &mut f);
        if let Some(server) = server {
            if let Some(v) = get_exact(&self.by_server, server) {
                v.iter().copied().for_each(&mut f);
            }
            self.server_prefix.walk(server.bytes(), &mut f);
        }
        self.rest.iter().copied().for_each(f);
    }

    /// The candidates collected and sorted (for tests).
    #[cfg(test)]
    fn candidates(&self, tool: &str, server: Option<&str>) -> Vec<usize> {
        let mut out = Vec::new();
        self.for_each_candidate(tool, server, |i| out.push(i));
        out.sort_unstable();
        out
    }
}

fn push_exact(map: &mut ExactMap, name: &str, rule: usize) {
    let key = name.to_ascii_lowercase();
    match map.get_mut(key.as_str()) {
        Some(v) => v.push(rule),
        None => {
            map.insert(key.into_boxed_str(), vec![rule]);
        }
    }
}

fn get_exact<'m>(map: &'m ExactMap, name: &str) -> Option<&'m [usize]> {
    if map.is_empty() {
        // Skips hashing the name when no rule of this kind names one.
        return None;
    }
    map.get(name).map(Vec::as_slice)
}

/// A byte trie, flattened: a node's children are `labels[edges_start..edges_end]` (sorted)
/// leading to the nodes at the same positions of `targets`, and the rules whose key ends at
/// it are `rules[rules_start..rules_end]`. Node 0 is the root; an empty trie has no nodes.
#[derive(Debug, Clone, Default)]
struct Trie {
    nodes: Vec<Node>,
    labels: Vec<u8>,
    targets: Vec<usize>,
    rules: Vec<usize>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Node {
    edges_start: usize,
    edges_end: usize,
    rules_start: usize,
    rules_end: usize,
}

impl Trie {
    /// Calls `f` with the rules of every key that is a prefix of `name` (the empty key
    /// included), shortest key first, following `name`'s bytes ASCII-lower-cased and
    /// stopping at the first byte with no edge.
    fn walk(&self, name: impl Iterator<Item = u8>, f: &mut impl FnMut(usize)) {
        let Some(mut node) = self.nodes.first() else {
            return;
        };
        let mut name = name;
        loop {
            if let Some(rules) = self.rules.get(node.rules_start..node.rules_end) {
                rules.iter().copied().for_each(&mut *f);
            }
            let Some(byte) = name.next() else {
                return;
            };
            let byte = byte.to_ascii_lowercase();
            let Some(labels) = self.labels.get(node.edges_start..node.edges_end) else {
                return;
            };
            let Some(at) = labels.iter().position(|&l| l == byte) else {
                return;
            };
            let next = self
                .targets
                .get(node.edges_start + at)
                .and_then(|&t| self.nodes.get(t));
            match next {
                Some(n) => node = n,
                None => return,
            }
        }
    }
}

/// A trie being built: one node per distinct key prefix, children unsorted.
#[derive(Debug, Default)]
struct TrieBuilder {
    children: Vec<Vec<(u8, usize)>>,
    rules: Vec<Vec<usize>>,
}

impl TrieBuilder {
    /// Adds `rule` under `key`, ASCII-lower-cased.
    fn insert(&mut self, key: impl Iterator<Item = u8>, rule: usize) {
        if self.children.is_empty() {
            self.children.push(Vec::new());
            self.rules.push(Vec::new());
        }
        let mut node = 0;
        for byte in key {
            let byte = byte.to_ascii_lowercase();
            let found = self
                .children
                .get(node)
                .and_then(|c| c.iter().find(|&&(l, _)| l == byte))
                .map(|&(_, t)| t);
            node = match found {
                Some(t) => t,
                None => {
                    let t = self.children.len();
                    self.children.push(Vec::new());
                    self.rules.push(Vec::new());
                    if let Some(c) = self.children.get_mut(node) {
                        c.push((byte, t));
                    }
                    t
                }
            };
        }
        if let Some(r) = self.rules.get_mut(node) {
            r.push(rule);
        }
    }

    /// Flattens the trie, children sorted by label.
    fn finish(self) -> Trie {
        let mut trie = Trie {
            nodes: Vec::with_capacity(self.children.len()),
            labels: Vec::with_capacity(self.children.len().saturating_sub(1)),
            targets: Vec::with_capacity(self.children.len().saturating_sub(1)),
            rules: Vec::with_capacity(self.rules.iter().map(Vec::len).sum()),
        };
        for (mut children, rules) in self.children.into_iter().zip(self.rules) {
            children.sort_unstable_by_key(|&(l, _)| l);
            let edges_start = trie.labels.len();
            for (label, target) in children {
                trie.labels.push(label);
                trie.targets.push(target);
            }
            let rules_start = trie.rules.len();
            trie.rules.extend(rules);
            trie.nodes.push(Node {
                edges_start,
                edges_end: trie.labels.len(),
                rules_start,
                rules_end: trie.rules.len(),
            });
        }
        trie
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trie(keys: &[(&str, usize)], reversed: bool) -> Trie {
        let mut b = TrieBuilder::default();
        for &(k, r) in keys {
            if reversed {
                b.insert(k.bytes().rev(), r);
            } else {
                b.insert(k.bytes(), r);
            }
        }
        b.finish()
    }

    fn prefixes(t: &Trie, name: &str) -> Vec<usize> {
        let mut out = Vec::new();
        t.walk(name.bytes(), &mut |r| out.push(r));
        out
    }

    fn suffixes(t: &Trie, name: &str) -> Vec<usize> {
        let mut out = Vec::new();
        t.walk(name.bytes().rev(), &mut |r| out.push(r));
        out
    }

    #[test]
    fn r19_trie_overlapping_prefixes_are_each_found_shortest_first() {
        let t = trie(
            &[
                ("refund_order", 3),
                ("re", 0),
                ("refund_", 1),
                ("refund_", 2),
                ("rex", 4),
            ],
            false,
        );
        assert_eq!(prefixes(&t, "refund_order"), [0, 1, 2, 3]);
        assert_eq!(prefixes(&t, "refund_orders"), [0, 1, 2, 3]);
        assert_eq!(prefixes(&t, "refund_orde"), [0, 1, 2]);
        assert_eq!(prefixes(&t, "rex"), [0, 4]);
        assert_eq!(prefixes(&t, "r"), Vec::<usize>::new());
        assert_eq!(prefixes(&t, "xrefund_order"), Vec::<usize>::new());
        assert_eq!(prefixes(&t, ""), Vec::<usize>::new());
    }

    #[test]
    fn r19_reversed_trie_finds_suffixes() {
        let t = trie(
            &[("_order", 0), ("order", 1), ("r", 2), ("_orders", 3)],
            true,
        );
        assert_eq!(suffixes(&t, "refund_order"), [2, 1, 0]);
        assert_eq!(suffixes(&t, "reorder"), [2, 1]);
        assert_eq!(suffixes(&t, "refund_orders"), [3]);
        assert_eq!(suffixes(&t, "order_x"), Vec::<usize>::new());
        // A key longer than the name is not a suffix of it.
        assert_eq!(suffixes(&t, "der"), [2]);
    }

    #[test]
    fn r19_empty_literal_matches_every_name() {
        let t = trie(&[("", 7), ("a", 8)], false);
        assert_eq!(prefixes(&t, ""), [7]);
        assert_eq!(prefixes(&t, "b"), [7]);
        assert_eq!(prefixes(&t, "ab"), [7, 8]);
        assert_eq!(prefixes(&Trie::default(), "anything"), Vec::<usize>::new());
    }

    #[test]
    fn r2_trie_folds_ascii_case_on_both_sides() {
        let t = trie(&[("Refund_", 0)], false);
        assert_eq!(prefixes(&t, "refund_order"), [0]);
        assert_eq!(prefixes(&t, "REFUND_ORDER"), [0]);
        let t = trie(&[("_ORDER", 1)], true);
        assert_eq!(suffixes(&t, "refund_Order"), [1]);
    }

    #[test]
    fn r2_trie_compares_non_ascii_bytes_as_they_are() {
        // R2 folds ASCII only: `Ä` and `ä` are different names.
        let t = trie(&[("ä", 0), ("straße_", 1)], false);
        assert_eq!(prefixes(&t, "äpfel"), [0]);
        assert_eq!(prefixes(&t, "Äpfel"), Vec::<usize>::new());
        assert_eq!(prefixes(&t, "STRAßE_x"), [1]);
        assert_eq!(prefixes(&t, "STRASSE_x"), Vec::<usize>::new());
        // A literal sharing only the first byte of a multi-byte character is not a prefix.
        let t = trie(&[("é", 2)], false); // C3 A9
        assert_eq!(prefixes(&t, "è"), Vec::<usize>::new()); // C3 A8
        let t = trie(&[("_é", 3)], true);
        assert_eq!(suffixes(&t, "café_é"), [3]);
        assert_eq!(suffixes(&t, "café_è"), Vec::<usize>::new());
    }

    #[test]
    fn trie_is_flat_and_small() {
        let t = trie(&[("ab", 0), ("ac", 1), ("abd", 2)], false);
        // root, a, b, c, d
        assert_eq!(t.nodes.len(), 5);
        assert_eq!(t.labels.len(), 4);
        assert_eq!(t.targets.len(), 4);
        assert_eq!(
            t.rules,
            [0, 1, 2],
            "rules grouped by node, nodes in creation order"
        );
    }

    fn index(rules: serde_json::Value) -> (Index, super::super::Policy) {
        let p = super::super::Policy::from_json(
            &serde_json::json!({ "rules": rules }),
            &super::super::Limits::default(),
        )
        .unwrap();
        (Index::build(p.rules()), p)
    }

    #[test]
    fn r18_every_rule_is_in_exactly_one_bucket_and_candidates_never_repeat() {
        let (ix, p) = index(serde_json::json!([
            {"effect": "ask", "tool": "create_issue"},
            {"effect": "ask", "tool": "Create_Issue"},
            {"effect": "deny", "tool": "create_*"},
            {"effect": "deny", "tool": "c*"},
            {"effect": "ask", "tool": "*_issue"},
            {"effect": "ask", "tool": "*e"},
            {"effect": "ask", "server": "github"},
            {"effect": "deny", "server": "git*"},
            {"effect": "ask", "tool": "*x*"},
            {"effect": "ask", "server": "*hub"},
            {"effect": "ask"},
            {"effect": "ask", "tool": "*"},
        ]));
        let every = ix.by_tool.values().map(Vec::len).sum::<usize>()
            + ix.tool_prefix.rules.len()
            + ix.tool_suffix.rules.len()
            + ix.by_server.values().map(Vec::len).sum::<usize>()
            + ix.server_prefix.rules.len()
            + ix.rest.len();
        assert_eq!(every, p.rules().len());
        assert_eq!(
            ix.candidates("create_issue", Some("github")),
            (0..12).collect::<Vec<_>>()
        );
        assert_eq!(ix.candidates("delete", None), [5, 8, 9, 10, 11]);
        assert_eq!(ix.candidates("cx", Some("gitlab")), [3, 7, 8, 9, 10, 11]);
    }

    #[test]
    fn r16_r18_index_agrees_with_the_loop_on_overlapping_literals() {
        use super::super::{Effect, Subject};
        use toolgate_core::ToolKind;
        let literals = ["", "a", "ab", "abc", "B", "bc", "cab", "é", "É", "aé"];
        let effects = ["allow", "ask", "deny"];
        let mut rules = Vec::new();
        for (n, lit) in literals.iter().enumerate() {
            // A blank exact name is refused (R22): `*` stands in for it.
            let exact = if lit.is_empty() { "*" } else { lit };
            for (k, sel) in [
                serde_json::json!({ "tool": exact }),
                serde_json::json!({ "tool": format!("{lit}*") }),
                serde_json::json!({ "tool": format!("*{lit}") }),
                serde_json::json!({ "tool": format!("{lit}*{lit}") }),
                serde_json::json!({ "server": exact }),
                serde_json::json!({ "server": format!("{lit}*"), "tool": "*c" }),
                serde_json::json!({ "server": format!("*{lit}") }),
            ]
            .into_iter()
            .enumerate()
            {
                let mut rule = sel;
                // The rules of the empty literal match (almost) everything: they only allow.
                let effect = if lit.is_empty() {
                    "allow"
                } else {
                    effects[(n + k) % 3]
                };
                rule["effect"] = serde_json::json!(effect);
                // Every rule twice, so ties between equal effects are decided by order.
                rules.push(rule.clone());
                rules.push(rule);
            }
        }
        let limits = super::super::Limits {
            tool_rules: rules.len(),
            ..Default::default()
        };
        let p = super::super::Policy::from_json(&serde_json::json!({ "rules": rules }), &limits)
            .unwrap();
        let names = [
            "", "a", "A", "ab", "AB", "abc", "abcab", "b", "bc", "cab", "xbc", "é", "É", "aé",
            "aÉ", "éab", "abé", "x",
        ];
        let mut decided = [0; 3];
        for tool in names {
            for server in names.iter().map(|s| Some(*s)).chain([None]) {
                let kind = if server.is_some() {
                    ToolKind::Mcp
                } else {
                    ToolKind::Http
                };
                let s = Subject {
                    kind,
                    tool,
                    server,
                    agent: "a",
                };
                let input = serde_json::json!({});
                let got = p.evaluate(&s, &input);
                assert_eq!(got, p.evaluate_naive(&s, &input), "{tool:?} on {server:?}");
                if let Some(e) = got.effect {
                    decided[match e {
                        Effect::Allow => 0,
                        Effect::Ask => 1,
                        Effect::Deny => 2,
                    }] += 1;
                }
            }
        }
        assert!(
            decided.iter().all(|&n| n > 0),
            "every effect decides somewhere: {decided:?}"
        );
    }
}
