//! Issue 20: an upstream MCP server that cannot start is reported with the command line
//! tried and the end of its own standard error, a real process each time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::time::Duration;

use toolgate::GovernanceHandle;
use toolgate_engine::Governance;
use toolgate_mcp::{GatewayError, McpGateway, McpServerConfig};

fn gateway() -> McpGateway {
    McpGateway::new(GovernanceHandle::new(
        Governance::builder().build().unwrap(),
    ))
}

fn connect_error(e: GatewayError) -> String {
    match e {
        GatewayError::Connect { server, message } => {
            assert_eq!(server, "broken");
            message
        }
        other => panic!("not a connect error: {other:?}"),
    }
}

#[tokio::test]
async fn issue20_an_upstream_that_exits_is_reported_with_its_stderr_and_command() {
    let config = McpServerConfig::stdio("broken", "sh")
        .unwrap()
        .arg("-c")
        .arg("echo 'starting up' >&2; echo 'fatal: GITHUB_TOKEN is not set' >&2; exit 3")
        .request_timeout(Duration::from_secs(10));
    let message = connect_error(gateway().connect(config).await.unwrap_err());
    assert!(
        message.contains("fatal: GITHUB_TOKEN is not set"),
        "{message}"
    );
    assert!(message.contains("starting up"), "{message}");
    assert!(
        message.contains("(the command was `sh -c 'echo '\\''starting up'\\'' >&2;"),
        "{message}"
    );
}

#[tokio::test]
async fn issue20_an_upstream_that_cannot_be_started_names_the_command_line() {
    let config = McpServerConfig::stdio("broken", "/nonexistent/mcp-server")
        .unwrap()
        .arg("--port")
        .arg("a b");
    let message = connect_error(gateway().connect(config).await.unwrap_err());
    assert!(
        message.starts_with("cannot start `/nonexistent/mcp-server --port 'a b'`: "),
        "{message}"
    );
}

#[tokio::test]
async fn issue20_an_upstream_that_says_nothing_is_reported_as_such() {
    let config = McpServerConfig::stdio("broken", "sh")
        .unwrap()
        .arg("-c")
        .arg("exit 1")
        .request_timeout(Duration::from_secs(10));
    let message = connect_error(gateway().connect(config).await.unwrap_err());
    assert!(
        message.contains("(the command was `sh -c 'exit 1'`); it wrote nothing to standard error"),
        "{message}"
    );
}
