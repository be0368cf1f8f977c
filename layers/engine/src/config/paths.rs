//! The relative file paths of a configuration (`audit.file`, `inbox.sqlite`) resolved
//! against the configuration file's own folder, whatever the working directory.

use std::path::Path;

use serde_json::Value;

/// The folder a configuration file's relative paths are resolved against: the file's own
/// folder, made absolute (against the working directory, without touching the file system).
///
/// ```
/// use std::path::Path;
/// use toolgate_engine::config::config_dir;
///
/// assert_eq!(config_dir(Path::new("/etc/toolgate/config.json")), Path::new("/etc/toolgate"));
/// let here = std::env::current_dir().unwrap();
/// assert_eq!(config_dir(Path::new("config.json")), here);
/// assert_eq!(config_dir(Path::new("examples/a.json")), here.join("examples"));
/// ```
pub fn config_dir(path: &Path) -> std::path::PathBuf {
    let parent = path.parent().unwrap_or(Path::new(""));
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let abs = std::path::absolute(parent).unwrap_or_else(|_| parent.to_path_buf());
    // `absolute` keeps a `.` component: drop it so the folder reads cleanly.
    abs.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// `path` resolved against `dir` when it is relative; unchanged when absolute.
fn resolved(path: &str, dir: &Path) -> String {
    if Path::new(path).is_absolute() {
        path.to_owned()
    } else {
        dir.join(path).display().to_string()
    }
}

/// Resolves the relative file paths of a configuration document against `dir` (the
/// configuration file's folder, [`config_dir`]): `audit.file` and `inbox.sqlite`. The `mcp`
/// section's paths (a server's `cwd` and `command`) are resolved by `toolgate-mcp`'s
/// `ServeConfig::relative_to`. Fields that are not strings are left for the reader to
/// refuse at their path.
///
/// ```
/// use std::path::Path;
/// use serde_json::json;
/// use toolgate_engine::config::resolve_relative_paths;
///
/// let mut doc = json!({"audit": {"file": "audit.jsonl"}, "inbox": {"sqlite": "/var/inbox.db"}});
/// resolve_relative_paths(&mut doc, Path::new("/etc/toolgate"));
/// assert_eq!(doc["audit"]["file"], "/etc/toolgate/audit.jsonl");
/// assert_eq!(doc["inbox"]["sqlite"], "/var/inbox.db", "absolute paths stay");
/// ```
pub fn resolve_relative_paths(document: &mut Value, dir: &Path) {
    for (section, field) in [("audit", "file"), ("inbox", "sqlite")] {
        if let Some(Value::String(p)) = document.get_mut(section).and_then(|s| s.get_mut(field))
            && !p.trim().is_empty()
        {
            *p = resolved(p, dir);
        }
    }
}
