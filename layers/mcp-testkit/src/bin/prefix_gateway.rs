//! `toolgate-mcp-prefix-gateway`: the prefixing gateway of `toolgate_mcp_testkit::prefix_gateway`
//! (SPEC R41), on standard I/O, in front of one upstream stdio server.
//!
//! ```text
//! toolgate-mcp-prefix-gateway --prefix mem- [--keep NAME]... -- PROGRAM [ARG]...
//! ```
//!
//! The upstream inherits this process's environment.

use std::process::ExitCode;

use toolgate_mcp_testkit::prefix_gateway::PrefixGateway;

fn usage(problem: &str) -> ExitCode {
    eprintln!("toolgate-mcp-prefix-gateway: {problem}");
    eprintln!(
        "usage: toolgate-mcp-prefix-gateway --prefix PREFIX [--keep NAME]... -- PROGRAM [ARG]..."
    );
    ExitCode::from(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut prefix: Option<String> = None;
    let mut keep = Vec::new();
    let mut args = std::env::args().skip(1);
    let mut upstream: Vec<String> = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--prefix" => match args.next() {
                Some(p) if !p.is_empty() => prefix = Some(p),
                _ => return usage("`--prefix` needs a prefix that is not empty"),
            },
            "--keep" => match args.next() {
                Some(name) => keep.push(name),
                None => return usage("`--keep` needs a tool name"),
            },
            "--" => {
                upstream.extend(args.by_ref());
                break;
            }
            other => return usage(&format!("unknown argument `{other}`")),
        }
    }
    let Some(prefix) = prefix else {
        return usage("`--prefix` is required");
    };
    let Some((program, rest)) = upstream.split_first() else {
        return usage("the upstream command is missing after `--`");
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest).kill_on_drop(true);
    let gateway = match PrefixGateway::start(prefix, cmd).await {
        Ok(g) => keep.into_iter().fold(g, PrefixGateway::keep),
        Err(e) => {
            eprintln!("toolgate-mcp-prefix-gateway: cannot start `{program}`: {e}");
            return ExitCode::FAILURE;
        }
    };
    match gateway.serve_stdio().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate-mcp-prefix-gateway: {e}");
            ExitCode::FAILURE
        }
    }
}
