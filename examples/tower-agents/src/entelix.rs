//! entelix: toolgate's layer on the tool registry a `ReActAgentBuilder` dispatches through.
//!
//! [`ToolgateToolLayer`] is a `tower::Layer` over entelix's boxed tool service; attach it with
//! `ToolRegistry::layer_named("toolgate", ...)` and hand the registry to
//! `ReActAgentBuilder::new(model, tools)`. Every tool the agent dispatches is decided by
//! toolgate as the layer's agent profile; a refused or held call is a tool error whose text is
//! toolgate's model-facing reason (entelix shows it to the model as an `is_error` tool
//! result), and the tool never runs.
//!
//! ```no_run
//! # fn f(tools: entelix_core::ToolRegistry) -> Result<(), Box<dyn std::error::Error>> {
//! use toolgate::core::AgentRef;
//! use toolgate::{GovernanceHandle, ToolgateLayer};
//! use toolgate::engine::config::{Format, load_str};
//! use toolgate_tower_agents::entelix::ToolgateToolLayer;
//!
//! let handle = GovernanceHandle::new(load_str(
//!     r#"{"tools": [{"kind": "http", "name": "double"}],
//!        "agents": [{"name": "research", "allowed_tools": ["double"]}]}"#,
//!     Format::Json,
//! )?);
//! let layer = ToolgateToolLayer::new(ToolgateLayer::builder(handle).build()?, AgentRef::profile("research"));
//! let tools = tools.layer_named("toolgate", layer);
//! # let _ = tools; Ok(()) }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use entelix_core::service::{BoxedToolService, ToolInvocation};
use entelix_core::{Error, Result};
use serde_json::{Value, json};
use toolgate::ToolgateLayer;
use toolgate::core::{AgentRef, ToolCall, ToolResponse};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt, service_fn};

/// toolgate's layer for an entelix tool registry, deciding as one agent profile.
#[derive(Clone)]
pub struct ToolgateToolLayer {
    layer: Arc<ToolgateLayer>,
    agent: AgentRef,
}

impl std::fmt::Debug for ToolgateToolLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolgateToolLayer")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl ToolgateToolLayer {
    /// Decides every dispatched tool call with `layer`, as `agent`.
    pub fn new(layer: ToolgateLayer, agent: AgentRef) -> Self {
        Self {
            layer: Arc::new(layer),
            agent,
        }
    }
}

/// The governed service: entelix's invocation in, the tool's JSON (or toolgate's refusal as
/// a tool error) out.
#[derive(Clone)]
pub struct ToolgateToolService {
    stack: BoxCloneService<(ToolCall, ToolInvocation), ToolResponse, Infallible>,
    agent: AgentRef,
}

impl Layer<BoxedToolService> for ToolgateToolLayer {
    type Service = ToolgateToolService;

    fn layer(&self, inner: BoxedToolService) -> Self::Service {
        // Inside toolgate's layer: the call that was decided becomes entelix's invocation
        // again, its input the decided one.
        let tool = service_fn(move |call: ToolCall| {
            let inner = inner.clone();
            async move {
                let Some(mut invocation) = call.extensions.get::<Dispatch>().map(|d| d.0.clone())
                else {
                    return Ok::<_, Infallible>(ToolResponse::Failed(
                        toolgate::core::ToolOutput::new(json!(
                            "the call lost the invocation it was made from"
                        )),
                    ));
                };
                invocation.input = call.input;
                Ok(match inner.oneshot(invocation).await {
                    Ok(v) => ToolResponse::Completed(toolgate::core::ToolOutput::new(v)),
                    Err(e) => {
                        ToolResponse::Failed(toolgate::core::ToolOutput::new(json!(e.to_string())))
                    }
                })
            }
        });
        let governed = self.layer.layer(tool);
        let stack = BoxCloneService::new(service_fn(
            move |(mut call, invocation): (ToolCall, ToolInvocation)| {
                let governed = governed.clone();
                call.extensions.insert(Dispatch(invocation));
                async move { governed.oneshot(call).await }
            },
        ));
        ToolgateToolService {
            stack,
            agent: self.agent.clone(),
        }
    }
}

/// The entelix invocation a tool call was made from, carried through toolgate's layer.
#[derive(Clone)]
struct Dispatch(ToolInvocation);

impl Service<ToolInvocation> for ToolgateToolService {
    type Response = Value;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Value>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, invocation: ToolInvocation) -> Self::Future {
        let stack = self.stack.clone();
        let call = ToolCall::new(
            self.agent.clone(),
            invocation.metadata.name.clone(),
            invocation.input.clone(),
        );
        Box::pin(async move {
            let response = match stack.oneshot((call, invocation)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            crate::model_view(&response).map_err(Error::invalid_request)
        })
    }
}
