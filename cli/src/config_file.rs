//! Reading the configuration file a command names, with relative paths (`inbox.sqlite`,
//! `audit.file`) resolved against the file's own folder.

use std::path::Path;

use toolgate_engine::config::{self, Format};

/// The configuration given with `--config` (to the commands that work with an inbox),
/// loaded: its `inbox` section must read too (by the inbox's reader), whether or not the
/// command takes its store from it.
pub(crate) fn load_config(path: &Path) -> Result<toolgate_engine::Governance, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let refused = |e: &dyn std::fmt::Display| {
        format!("the configuration `{}` does not load:\n{e}", path.display())
    };
    // Relative paths (`inbox.sqlite`, `audit.file`) are the configuration's folder's.
    let gov = config::load_str_in(&text, Format::from_path(path), &config::config_dir(path))
        .map_err(|e| refused(&e))?;
    toolgate_inbox::InboxSettings::read(&gov).map_err(|e| refused(&e))?;
    Ok(gov)
}
