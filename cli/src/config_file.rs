//! Reading the configuration file a command names, with relative paths (`inbox.sqlite`,
//! `audit.file`) resolved against the file's own folder.

use std::path::Path;

use toolgate_engine::config::{self, Format};

/// The configuration given with `--config`, loaded.
pub(crate) fn load_config(path: &Path) -> Result<toolgate_engine::Governance, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    // Relative paths (`inbox.sqlite`, `audit.file`) are the configuration's folder's.
    config::load_str_in(&text, Format::from_path(path), &config::config_dir(path))
        .map_err(|e| format!("the configuration `{}` does not load:\n{e}", path.display()))
}
