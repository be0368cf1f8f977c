//! Key names: how a key is compared with the key-name rules (module docs, rule 1).

/// A key name as compared: lower case, without `-`, `_`, `.` and spaces.
pub(super) fn normalise(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether the normalised `key` contains `rule`, except `auth` in `author…`/`authority`.
pub(super) fn contains_rule(key: &str, rule: &str) -> bool {
    key.match_indices(rule).any(|(i, _)| {
        if rule != "auth" {
            return true;
        }
        let rest = key.get(i + rule.len()..).unwrap_or_default();
        !(rest.starts_with("or") && !rest.starts_with("oriz") && !rest.starts_with("oris"))
    })
}
