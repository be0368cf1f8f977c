//! `toolgate mcp lock`: the definition lock of the configuration's upstream MCP servers
//! (`toolgate_mcp::lock`; serve.md, "The definition lock and the description scanner").
//!
//! Connects every server of the `mcp` section, lists its tools, and writes the lock file
//! (`mcp.lock_file`, default `toolgate.lock` beside the configuration). With `--check` it
//! writes nothing and compares: every difference on standard error, exit 1 when there is
//! any. The description scanner's findings are printed as warnings either way, unless
//! `mcp.scan` is `"off"`.
//!
//! Exit codes: 0 written, or no difference; 1 (`--check`) a difference; 2 a configuration
//! that does not load, a server that cannot be connected, a lock file that cannot be read or
//! written.

use std::path::Path;
use std::process::ExitCode;

use toolgate::GovernanceHandle;
use toolgate_engine::config::{self, Format};
use toolgate_mcp::McpGateway;
use toolgate_mcp::lock::Lockfile;
use toolgate_mcp::scan::{ScanMode, scan_tool};
use toolgate_mcp::serve::ServeConfig;

pub(crate) fn run(path: &Path, check: bool) -> Result<ExitCode, String> {
    let bad = |e: &dyn std::fmt::Display| {
        format!("the configuration `{}` does not load:\n{e}", path.display())
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let format = Format::from_path(path);
    let dir = config::config_dir(path);
    let governance = config::load_str_in(&text, format, &dir).map_err(|e| bad(&e))?;
    crate::config_file::owned_sections(&governance).map_err(|e| bad(&e))?;
    let document = config::parse_text(&text, format).map_err(|e| bad(&e))?;
    let (_, serve) = ServeConfig::split(document).map_err(|e| bad(&e))?;
    let serve = serve
        .relative_to(&dir)
        .load_secrets()
        .map_err(|e| bad(&e))?;
    let lock_path = serve.gateway.lock_path.clone();
    let scan = serve.gateway.scan;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    let now = rt.block_on(async {
        let gateway = McpGateway::new(GovernanceHandle::new(governance));
        for server in &serve.servers {
            if let Err(e) = gateway.connect(server.clone()).await {
                gateway.shutdown().await;
                return Err(format!("cannot list the tools of an upstream server:\n{e}"));
            }
        }
        let lock = gateway.lockfile();
        if scan != ScanMode::Off {
            for server in gateway.servers() {
                print_findings(&server, &gateway.listed_tools(&server).unwrap_or_default());
            }
        }
        gateway.shutdown().await;
        Ok(lock)
    })?;
    if !check {
        std::fs::write(&lock_path, now.to_json())
            .map_err(|e| format!("cannot write `{}`: {e}", lock_path.display()))?;
        let tools: usize = now.servers.values().map(|t| t.len()).sum();
        eprintln!(
            "toolgate: locked {tools} tool(s) of {} server(s) in `{}`",
            now.servers.len(),
            lock_path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let text = std::fs::read_to_string(&lock_path).map_err(|e| {
        format!(
            "cannot read the lock file `{}` ({e}): write it with `toolgate mcp lock`",
            lock_path.display()
        )
    })?;
    let locked = Lockfile::parse(&text).map_err(|e| {
        format!(
            "the lock file `{}` does not read:\n{e}",
            lock_path.display()
        )
    })?;
    let diff = locked.diff(&now);
    if diff.is_empty() {
        eprintln!(
            "toolgate: every upstream tool is as locked in `{}`",
            lock_path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "toolgate: {} difference(s) from the lock `{}`:",
        diff.len(),
        lock_path.display()
    );
    for d in &diff {
        eprintln!("  {d}");
    }
    Ok(ExitCode::from(1))
}

/// Prints one warning per finding of `tools` of `server`.
fn print_findings(server: &str, tools: &[toolgate_mcp::rmcp::model::Tool]) {
    for t in tools {
        for f in scan_tool(t) {
            eprintln!(
                "warning: mcp.servers.{server}: tool `{}`: {f} (the description scanner; `mcp.scan: \"withhold\"` withholds it)",
                t.name
            );
        }
    }
}
