//! The gateway's own settings in the `mcp` section (serve.md): the definition lock
//! (`locked`, `lock_file`), the description scanner (`scan`), deferred tools
//! (`deferred_tools`) and where quotas are counted (`quota_counting`).

use std::path::PathBuf;

use serde_json::{Map, Value};
use toolgate_engine::ConfigErrors;

use crate::lock::{LOCK_FILE, Lockfile};
use crate::scan::ScanMode;

/// `mcp.locked`, `mcp.lock_file`, `mcp.scan`, `mcp.deferred_tools`.
///
/// ```json
/// "mcp": {
///   "servers": {"everything": {"command": "npx", "args": ["@modelcontextprotocol/server-everything"]}},
///   "locked": true,
///   "scan": "withhold",
///   "deferred_tools": true
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayOptions {
    /// With `locked: true`, the lock file (`lock_file`, default `toolgate.lock` beside the
    /// configuration): every upstream tool whose definition is not the locked one is
    /// withheld ([`crate::lock`]).
    pub lock_file: Option<PathBuf>,
    /// Where `toolgate mcp lock` writes (`lock_file`, whether or not `locked` is set).
    pub lock_path: PathBuf,
    /// What the description scanner's findings do ([`crate::scan`]; default `warn`).
    pub scan: ScanMode,
    /// `deferred_tools: true`: each agent is shown `tool_search` and `tool_call` instead of
    /// its tools (R13, R38).
    pub deferred_tools: bool,
    /// `quota_counting: "per_process"`: the operator's word that quotas may be counted in
    /// each `toolgate mcp serve` process alone (each stdio connection and each restart
    /// starts at zero). Without it, a policy with quotas needs the inbox's shared store
    /// (R44; [`ServeConfig::check_quota_store`](super::ServeConfig::check_quota_store)).
    pub quotas_per_process: bool,
}

impl GatewayOptions {
    /// Reads the keys of [`KEYS`] from the `mcp` section.
    pub(super) fn read(obj: &Map<String, Value>, errs: &mut ConfigErrors) -> Self {
        let boolean = |key: &str, errs: &mut ConfigErrors| match obj.get(key) {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                errs.push(
                    format!("mcp.{key}"),
                    format!("expected `true` or `false`, found {other}"),
                );
                false
            }
        };
        let locked = boolean("locked", errs);
        let deferred_tools = boolean("deferred_tools", errs);
        let lock_path = match obj.get("lock_file") {
            None => PathBuf::from(LOCK_FILE),
            Some(Value::String(s)) if !s.trim().is_empty() => PathBuf::from(s),
            Some(other) => {
                errs.push(
                    "mcp.lock_file",
                    format!("expected the path of the lock file, found {other}"),
                );
                PathBuf::from(LOCK_FILE)
            }
        };
        let scan = match obj.get("scan") {
            None => ScanMode::default(),
            Some(Value::String(s)) if ScanMode::parse(s).is_some() => {
                ScanMode::parse(s).unwrap_or_default()
            }
            Some(other) => {
                errs.push(
                    "mcp.scan",
                    format!("expected `\"warn\"`, `\"withhold\"` or `\"off\"`, found {other}"),
                );
                ScanMode::default()
            }
        };
        let quotas_per_process = match obj.get("quota_counting") {
            None => false,
            Some(Value::String(s)) if s == "shared" => false,
            Some(Value::String(s)) if s == "per_process" => true,
            Some(other) => {
                errs.push(
                    "mcp.quota_counting",
                    format!(
                        "expected `\"shared\"` (the inbox's store, the default) or `\"per_process\"`, found {other}"
                    ),
                );
                false
            }
        };
        GatewayOptions {
            lock_file: locked.then(|| lock_path.clone()),
            lock_path,
            scan,
            deferred_tools,
            quotas_per_process,
        }
    }

    /// The keys as `toolgate config print` shows them, defaults spelled.
    pub(super) fn effective(&self, out: &mut Map<String, Value>) {
        out.insert("locked".into(), self.lock_file.is_some().into());
        out.insert(
            "lock_file".into(),
            self.lock_path.display().to_string().into(),
        );
        out.insert("scan".into(), self.scan.as_str().into());
        out.insert("deferred_tools".into(), self.deferred_tools.into());
        out.insert(
            "quota_counting".into(),
            match self.quotas_per_process {
                true => "per_process",
                false => "shared",
            }
            .into(),
        );
    }

    /// The lock file's paths resolved against the configuration's folder.
    pub(super) fn relative_to(mut self, dir: &std::path::Path) -> Self {
        if self.lock_path.is_relative() {
            self.lock_path = dir.join(&self.lock_path);
        }
        if let Some(p) = &self.lock_file
            && p.is_relative()
        {
            self.lock_file = Some(dir.join(p));
        }
        self
    }

    /// The lock in force: `None` without `locked: true`.
    ///
    /// # Errors
    ///
    /// `mcp.locked` when the file cannot be read (run `toolgate mcp lock`), its problems
    /// by path (`mcp.lock_file: servers.kb.lookup.definition: …`) when it does not parse.
    pub fn load_lock(&self) -> Result<Option<Lockfile>, ConfigErrors> {
        let Some(path) = &self.lock_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors::one(
                "mcp.locked",
                format!(
                    "the lock file `{}` cannot be read ({e}): write it with `toolgate mcp lock`",
                    path.display()
                ),
            )
        })?;
        Lockfile::parse(&text).map(Some).map_err(|e| {
            let mut out = ConfigErrors::default();
            for err in e.errors {
                out.push("mcp.lock_file", format!("`{}`: {err}", path.display()));
            }
            out
        })
    }
}
