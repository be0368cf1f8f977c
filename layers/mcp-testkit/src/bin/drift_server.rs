//! `toolgate-mcp-drift-server`: the drift server of `toolgate_mcp_testkit::drift_server`, on
//! standard I/O (default) or streamable HTTP on a loopback address.
//!
//! ```text
//! toolgate-mcp-drift-server [--page-size N] [--http 127.0.0.1:0]
//! ```
//!
//! With `--http`, the first line on standard output is `listening on http://ADDR/mcp`.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use toolgate_mcp_testkit::drift_server::DriftServer;

fn usage(problem: &str) -> ExitCode {
    eprintln!("toolgate-mcp-drift-server: {problem}");
    eprintln!("usage: toolgate-mcp-drift-server [--page-size N] [--http 127.0.0.1:PORT]");
    ExitCode::from(2)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut server = DriftServer::new();
    let mut http: Option<SocketAddr> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--page-size" => match args.next().and_then(|v| v.parse().ok()) {
                Some(n) => server = server.page_size(n),
                None => return usage("`--page-size` needs a number"),
            },
            "--http" => match args.next().and_then(|v| v.parse().ok()) {
                Some(addr) => http = Some(addr),
                None => return usage("`--http` needs an address such as `127.0.0.1:0`"),
            },
            other => return usage(&format!("unknown argument `{other}`")),
        }
    }
    let served = match http {
        Some(addr) => {
            server
                .serve_http(addr, |bound| {
                    let mut out = std::io::stdout();
                    let _ = writeln!(out, "listening on http://{bound}/mcp");
                    let _ = out.flush();
                })
                .await
        }
        None => server.serve_stdio().await,
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolgate-mcp-drift-server: {e}");
            ExitCode::FAILURE
        }
    }
}
