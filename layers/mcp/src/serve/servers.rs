//! The upstream servers in force, each with its supervisor, and their change on a reload
//! (servers added, removed or changed on SIGHUP without a restart; serve.md).
//!
//! A reload whose `mcp.servers` differs from the servers in force:
//! - a **removed** server's supervisor stops and its connection closes (its process ends);
//!   its tools leave the new snapshot, so the sessions that saw them are told their list
//!   changed and a call to one is `unknown_tool`;
//! - an **added** server is connected and its tools registered in the new snapshot;
//! - a **changed** server (any field of its entry) is closed and connected again with the
//!   new entry;
//! - the others keep their connection, and no downstream session is closed: an agent whose
//!   list did not change sees nothing happen.
//!
//! An added or changed server that cannot be connected does not undo the reload: its tools
//! are refused with the reason while its supervisor connects it with backoff, and `/readyz`
//! names it until it answers.

use super::*;

/// One upstream server in force: its entry and its supervisor.
pub(super) struct Supervised {
    pub(super) config: McpServerConfig,
    pub(super) task: tokio::task::JoinHandle<()>,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The servers in force, by id.
pub(super) type Servers = Mutex<std::collections::BTreeMap<String, Supervised>>;

/// The key the `down` map and the gateway know a server by.
pub(super) fn key_of(id: &str) -> String {
    toolgate_core::names::normalize_segment(id)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_else(|_| id.to_ascii_lowercase())
}

/// What a reload changes in the servers.
#[derive(Default)]
pub(super) struct ServerChange {
    pub(super) close: Vec<String>,
    pub(super) open: Vec<McpServerConfig>,
}

impl ServerChange {
    pub(super) fn is_empty(&self) -> bool {
        self.close.is_empty() && self.open.is_empty()
    }
}

impl Shared {
    /// The ids of the servers in force.
    pub(super) fn server_ids(&self) -> Vec<String> {
        lock(&self.servers).keys().cloned().collect()
    }

    /// Starts supervising `config` (see [`supervise`]).
    pub(super) fn supervise(self: &Arc<Self>, config: McpServerConfig) {
        let task = tokio::spawn(supervise(
            Arc::downgrade(self),
            config.clone(),
            Arc::clone(&self.down),
        ));
        lock(&self.servers).insert(config.id().to_owned(), Supervised { config, task });
    }

    /// What `wanted` changes in the servers in force.
    pub(super) fn server_change(&self, wanted: &[McpServerConfig]) -> ServerChange {
        let now = lock(&self.servers);
        let mut change = ServerChange::default();
        for (id, s) in now.iter() {
            match wanted.iter().find(|w| w.id() == id) {
                None => change.close.push(id.clone()),
                Some(w) if *w != s.config => {
                    change.close.push(id.clone());
                    change.open.push(w.clone());
                }
                Some(_) => {}
            }
        }
        for w in wanted {
            if !now.contains_key(w.id()) {
                change.open.push(w.clone());
            }
        }
        change
    }

    /// Closes the servers `ids` (their supervisors first, so none reconnects them).
    pub(super) async fn close_servers(&self, ids: &[String]) {
        for id in ids {
            drop(lock(&self.servers).remove(id));
            lock(&self.down).remove(&key_of(id));
            let _ = self.gateway.disconnect(id).await;
            tracing::info!(target: "toolgate_mcp::serve", server = id.as_str(), "closed on reload");
        }
    }

    /// Connects `configs` (their tools registered in the snapshot in force) and supervises
    /// each; one that cannot be connected is marked down, and its supervisor goes on trying.
    pub(super) async fn open_servers(self: &Arc<Self>, configs: Vec<McpServerConfig>) {
        for config in configs {
            let id = config.id().to_owned();
            match self.gateway.connect(config.clone()).await {
                Ok(_) => {
                    tracing::info!(target: "toolgate_mcp::serve", server = id.as_str(), "connected on reload");
                }
                Err(e) => {
                    tracing::warn!(target: "toolgate_mcp::serve", server = id.as_str(), "connecting failed on reload: {e}");
                    lock(&self.down).insert(
                        key_of(&id),
                        format!(
                            "MCP server `{id}` is not reachable ({e}); toolgate is connecting it, and its tools are refused until it answers"
                        ),
                    );
                }
            }
            self.supervise(config);
        }
    }
}
