//! Issue 35 item 10: MCP Apps through `toolgate mcp serve`. A tool's `_meta` reference to a
//! `ui://` resource reaches an agent only when it may read that resource (the content policy
//! of `resources/read`); the tool stays listed either way, and the resource itself is read
//! under the same policy.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use toolgate::GovernanceHandle;
use toolgate_engine::config::{Format, load_str};
use toolgate_mcp::McpServerConfig;
use toolgate_mcp::serve::{GovernedServer, ServeConfig, WireNames};

/// A server of two App tools, each naming its UI resource in `_meta`.
#[derive(Clone)]
struct Apps;

fn app_tool(name: &str, ui: &str) -> Tool {
    let mut t = Tool::new(
        name.to_owned(),
        format!("Opens the {name} app."),
        Arc::new(serde_json::Map::new()),
    );
    let Value::Object(meta) = json!({"ui": {"resourceUri": ui}, "other": "dropped"}) else {
        panic!()
    };
    t.meta = Some(meta.into());
    t
}

impl ServerHandler for Apps {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            app_tool("chart", "ui://apps/chart"),
            app_tool("admin", "ui://apps/admin"),
        ]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![]).into())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("ui://apps/chart", "chart"),
            Resource::new("ui://apps/admin", "admin"),
        ]))
    }

    async fn read_resource(
        &self,
        r: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        Ok(ReadResourceResult::new(vec![ResourceContents::text("<html></html>", r.uri)]).into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_an_apps_ui_reference_reaches_only_an_agent_that_may_read_it() {
    let gov = load_str(
        r#"{"agents": [
            {"name": "dev", "allowed_tools": ["apps__*"], "allowed_resources": ["apps__chart"]},
            {"name": "viewer", "allowed_tools": ["apps__*"]}]}"#,
        Format::Json,
    )
    .unwrap();
    let config = ServeConfig {
        servers: Vec::new(),
        tokens: HashMap::new(),
        token_names: HashMap::new(),
        call_timeout: Duration::from_secs(10),
        wire_names: WireNames::Qualified,
        jwt: None,
        gateway: Default::default(),
        hooks: Vec::new(),
    };
    let server = GovernedServer::start(GovernanceHandle::new(gov), &config, None)
        .await
        .unwrap();
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move { Apps.serve(server_end).await.unwrap().waiting().await });
    server
        .gateway()
        .connect_with(McpServerConfig::custom("apps").unwrap(), client_end)
        .await
        .unwrap();
    let listed = |agent: &'static str| {
        let server = server.clone();
        async move {
            let (client_end, server_end) = tokio::io::duplex(256 * 1024);
            tokio::spawn(async move { server.serve_io(agent, server_end).await });
            let client = ().serve(client_end).await.unwrap();
            let tools = client.list_all_tools().await.unwrap();
            let _ = client.cancel().await;
            tools
                .into_iter()
                .map(|t| (t.name.to_string(), t.meta.map(|m| Value::Object(m.0))))
                .collect::<HashMap<_, _>>()
        }
    };
    let dev = listed("dev").await;
    assert_eq!(
        dev["apps__chart"],
        Some(json!({"ui": {"resourceUri": "ui://apps/chart"}})),
        "its own UI, and nothing else of the server's `_meta`"
    );
    assert_eq!(
        dev["apps__admin"], None,
        "a UI it may not read: the reference is removed"
    );
    let viewer = listed("viewer").await;
    assert_eq!(viewer.len(), 2, "the tools stay listed: {viewer:?}");
    assert!(viewer.values().all(Option::is_none), "{viewer:?}");
}
