//! A child process speaking newline-delimited JSON-RPC on its standard input and output: the
//! client side of a stdio MCP server, and how it is stopped.

use super::*;

/// How long a closed server gets to exit on its own, and again after `SIGTERM`, before it is
/// killed (rmcp's waits too).
pub(super) const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A server started as a child process, spoken to over its standard input and output with
/// [`LineTransport`] (what rmcp's `TokioChildProcess` does with its own transport). Closing
/// it is the MCP stdio shutdown: close the server's standard input and wait up to 3 s for it
/// to exit; then (Unix) send `SIGTERM` and wait up to 3 s more; then kill it. Dropping it
/// kills it (the command is built with `kill_on_drop`).
pub(crate) struct ChildTransport {
    lines: LineTransport<RoleClient, tokio::process::ChildStdout, tokio::process::ChildStdin>,
    pub(super) child: tokio::process::Child,
}

impl std::fmt::Debug for ChildTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildTransport")
            .field("pid", &self.child.id())
            .finish_non_exhaustive()
    }
}

impl ChildTransport {
    /// Starts `cmd` with piped standard input, output and error; the error stream is
    /// returned for the caller to read.
    pub(crate) fn spawn(
        cmd: &mut tokio::process::Command,
    ) -> std::io::Result<(Self, Option<tokio::process::ChildStderr>)> {
        use std::process::Stdio;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(std::io::Error::other(
                "the server's standard input or output was not piped",
            ));
        };
        let stderr = child.stderr.take();
        Ok((
            Self {
                lines: LineTransport::new(stdout, stdin),
                child,
            },
            stderr,
        ))
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.lines.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.lines.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.lines.close().await?;
        if let Ok(done) = tokio::time::timeout(EXIT_WAIT, self.child.wait()).await {
            return done.map(|_| ());
        }
        if self.terminate()
            && let Ok(done) = tokio::time::timeout(EXIT_WAIT, self.child.wait()).await
        {
            return done.map(|_| ());
        }
        self.child.kill().await
    }
}

impl ChildTransport {
    /// Asks the server to end (`SIGTERM`); false where that cannot be sent (no pid: it has
    /// exited already, or not Unix), and then the caller kills it.
    #[cfg(unix)]
    fn terminate(&self) -> bool {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let Some(pid) = self.child.id().and_then(|id| i32::try_from(id).ok()) else {
            return false;
        };
        match kill(Pid::from_raw(pid), Signal::SIGTERM) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(pid, error = %e, "could not send SIGTERM to a stdio server; killing it");
                false
            }
        }
    }

    #[cfg(not(unix))]
    fn terminate(&self) -> bool {
        false
    }
}
