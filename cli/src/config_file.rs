//! Reading the configuration file a command names, with relative paths (`inbox.sqlite`,
//! `audit.file`) resolved against the file's own folder.

use std::path::Path;

use toolgate_engine::config::{self, Format};
use toolgate_engine::{ConfigErrors, Governance};

/// The sections of a built configuration that other crates own, read by their readers: the
/// approval page's fields of `approvers` (`api_keys`, `slack`, `jwt`'s verification
/// settings; with the `serve` feature) and the `inbox` section. Every command that loads a
/// configuration runs it after the engine's readers, so a configuration with any error is
/// refused whole (SPEC §8), whichever crate reads the failing field; `check` reports the
/// same errors with their paths.
pub(crate) fn owned_sections(gov: &Governance) -> Result<(), ConfigErrors> {
    let mut errs = ConfigErrors::default();
    #[cfg(feature = "serve")]
    if let Some(approvers) = gov.approver_settings()
        && let Err(e) = toolgate_web::access::PageAccess::read(approvers)
    {
        errs.errors.extend(e.errors);
    }
    if let Err(e) = toolgate_inbox::InboxSettings::read(gov) {
        errs.errors.extend(e.errors);
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// The configuration given with `--config`, loaded: the sections other crates own must read
/// too ([`owned_sections`]), whether or not the command uses them.
pub(crate) fn load_config(path: &Path) -> Result<toolgate_engine::Governance, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let refused = |e: &dyn std::fmt::Display| {
        format!("the configuration `{}` does not load:\n{e}", path.display())
    };
    // Relative paths (`inbox.sqlite`, `audit.file`) are the configuration's folder's.
    let gov = config::load_str_in(&text, Format::from_path(path), &config::config_dir(path))
        .map_err(|e| refused(&e))?;
    owned_sections(&gov).map_err(|e| refused(&e))?;
    Ok(gov)
}
