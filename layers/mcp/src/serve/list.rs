//! `tools/list`: each agent's projected list, cached per governance snapshot, and the
//! sessions told when it changes.

use super::*;

pub(super) struct Watched {
    pub(super) session: String,
    pub(super) to: notify::Notify,
    pub(super) agent: String,
    pub(super) seen: u64,
}

/// One agent's projected list and its fingerprint.
#[derive(Clone)]
pub(super) struct Listed {
    pub(super) tools: Arc<Vec<Tool>>,
    pub(super) fingerprint: u64,
    /// The `tool_search` index of these tools (`mcp.deferred_tools`), built on first use.
    pub(super) search: Arc<std::sync::OnceLock<deferred::ToolIndex>>,
}

/// Each agent's projected list for one governance snapshot: a repeated `tools/list` on an
/// unchanged snapshot is a map look-up, not a projection. The projection reads the snapshot
/// only ([`list_for`]), and every change — a reload, a policy put, drift re-registering an
/// upstream's tools — stores a new snapshot, so a new snapshot is the whole invalidation.
/// Holding the snapshot keeps its address from being reused, so `Arc::ptr_eq` cannot take
/// a newer snapshot for it.
#[derive(Default)]
pub(super) struct ListCache {
    pub(super) snapshot: Option<Arc<Governance>>,
    pub(super) agents: HashMap<String, Listed>,
}

/// The tools `agent` is shown, as MCP tools: the exposure of `governance` (R6–R13), each with
/// its description (and [`APPROVAL_NOTE`] when wrapped), input schema and annotations as
/// recorded at discovery.
pub fn list_for(governance: &Governance, agent: &str) -> Result<Vec<Tool>, UnknownAgent> {
    let exposure = governance.expose(agent)?;
    Ok(exposure
        .tools
        .into_iter()
        .map(|t| {
            let decl = governance
                .catalog()
                .get(&t.name)
                .and_then(|e| e.records.first())
                .map(|r| &r.decl);
            let schema = decl
                .and_then(|d| d.input_schema.clone())
                .and_then(|s| match s {
                    Value::Object(m) => Some(m),
                    _ => None,
                })
                .unwrap_or_else(|| {
                    let mut m = Map::new();
                    m.insert("type".into(), Value::String("object".into()));
                    m
                });
            let mut description = t.description.as_deref().unwrap_or_default().to_owned();
            if t.wrapped {
                if !description.is_empty() {
                    description.push(' ');
                }
                description.push_str(APPROVAL_NOTE);
            }
            let mut tool = Tool::new(t.name.to_string(), description, Arc::new(schema));
            if let Some(a) = decl.and_then(|d| d.annotations.as_ref()) {
                tool = tool.with_annotations(ToolAnnotations::from_raw(
                    a.title.clone(),
                    a.read_only_hint,
                    a.destructive_hint,
                    a.idempotent_hint,
                    a.open_world_hint,
                ));
            }
            tool
        })
        .collect())
}

fn fingerprint(tools: &[Tool]) -> u64 {
    let mut h = DefaultHasher::new();
    serde_json::to_string(tools)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

impl Shared {
    pub(super) fn tools_for(&self, agent: &str) -> Result<Vec<Tool>, UnknownAgent> {
        self.listed(agent).map(|l| l.tools.as_ref().clone())
    }

    /// The tools `agent` is shown by the current snapshot, from [`ListCache`] or projected
    /// (and cached) now.
    pub(super) fn listed(&self, agent: &str) -> Result<Listed, UnknownAgent> {
        let governance = self.gateway.handle().load();
        let current = |c: &ListCache| {
            c.snapshot
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, &governance))
        };
        {
            let cache = lock(&self.lists);
            if current(&cache)
                && let Some(listed) = cache.agents.get(agent)
            {
                return Ok(listed.clone());
            }
        }
        // Only what a connected server lists (the configuration's HTTP and toolset tools,
        // and MCP tools no server lists now, cannot be sent from here).
        let sendable: Vec<Tool> = list_for(&governance, agent)?
            .into_iter()
            .filter(|t| {
                self.gateway
                    .sendable(&toolgate_core::ToolRef::Name(t.name.to_string()))
                    .is_ok()
            })
            .map(|mut t| {
                // An MCP App's UI reference, judged per agent when listed.
                let name = toolgate_core::ToolRef::Name(t.name.to_string());
                t.meta = self.gateway.app_meta(&name).map(Into::into);
                t
            })
            .collect();
        // `mcp.wire_names`: what the client is shown, by own names in `"own"` mode.
        let tools = self.wire.list(&governance, sendable);
        let listed = Listed {
            fingerprint: fingerprint(&tools),
            tools: Arc::new(tools),
            search: Arc::default(),
        };
        let mut cache = lock(&self.lists);
        if !current(&cache) {
            // Only for the snapshot in force: one projected from a snapshot replaced in the
            // meantime is served to this request but not kept.
            if !Arc::ptr_eq(&self.gateway.handle().load(), &governance) {
                return Ok(listed);
            }
            cache.snapshot = Some(Arc::clone(&governance));
            cache.agents.clear();
        }
        cache.agents.insert(agent.to_owned(), listed.clone());
        Ok(listed)
    }

    pub(super) fn watch(&self, session: &str, to: &notify::Notify, agent: &str, seen: u64) {
        let mut w = lock(&self.watched);
        w.retain(|x| !x.to.closed());
        if let Some(x) = w
            .iter_mut()
            .find(|x| x.session == session && x.agent == agent)
        {
            x.seen = seen;
        } else {
            w.push(Watched {
                session: session.to_owned(),
                to: to.clone(),
                agent: agent.to_owned(),
                seen,
            });
        }
    }

    /// Sends `notifications/tools/list_changed` to each session (or `subscriptions/listen`
    /// stream) whose agent's list changed since it last listed or was told.
    pub(super) async fn notify_changes(&self) {
        let due: Vec<notify::Notify> = {
            let mut w = lock(&self.watched);
            w.retain(|x| !x.to.closed());
            let mut due = Vec::new();
            for x in w.iter_mut() {
                let now = self.listed(&x.agent).map_or(0, |l| l.fingerprint);
                if now != x.seen {
                    x.seen = now;
                    due.push(x.to.clone());
                }
            }
            due
        };
        for to in due {
            to.tools_changed().await;
        }
    }
}

/// The `ui://` resources a tool's `_meta` refers to (MCP Apps): `ui.resourceUri`, and the
/// older flat `ui/resourceUri`.
pub(super) fn ui_resources(meta: &rmcp::model::MetaObject) -> Vec<String> {
    let nested = meta
        .get("ui")
        .and_then(|u| u.get("resourceUri"))
        .and_then(Value::as_str);
    let flat = meta.get("ui/resourceUri").and_then(Value::as_str);
    nested.into_iter().chain(flat).map(str::to_owned).collect()
}

impl Shared {
    /// Each listed tool's MCP Apps reference kept only when `agent` may read the `ui://`
    /// resource it names (the same content policy as `resources/read`); a reference to one
    /// it may not read, or that no server lists, is removed from the listing (the tool
    /// stays).
    pub(super) async fn apps_for(&self, agent: &str, tools: &mut [Tool]) {
        for tool in tools.iter_mut() {
            let Some(meta) = &tool.meta else { continue };
            let mut readable = true;
            for uri in ui_resources(meta) {
                readable &= self.may_read_uri(agent, &uri).await;
            }
            if !readable {
                tool.meta = None;
            }
        }
    }
}
