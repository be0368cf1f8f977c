//! The handler of one downstream MCP session: the caller of each request, `tools/list`,
//! `tools/call` (elicitation, held calls, 2026-07-28 retries) and `logging/setLevel`.

use super::*;

/// The handler of one downstream MCP session.
pub struct GovernedSession {
    pub(super) shared: Arc<Shared>,
    pub(super) agent: Option<String>,
    pub(super) session: String,
    pub(super) turns: AtomicU64,
    /// The level the client set with `logging/setLevel`: relayed log messages below it are
    /// not sent.
    pub(super) log_level: Arc<relayed::LogFloor>,
    /// The token hash of the first request of an HTTP session (`None` for an `open_as`
    /// server): the session is bound to it, and a request with another token is refused.
    pub(super) opened_by: std::sync::OnceLock<Option<String>>,
    /// Where the `tools/call` arguments' numbers as written come from (R20).
    pub(super) tap: Tap,
}

/// Where a session's transport keeps each `tools/call`'s numbers as written (R20).
pub(super) enum Tap {
    /// A transport the host brought ([`GovernedServer::session`]): the arguments' values
    /// are all there is (an integer past 64 bits is the nearest double).
    None,
    /// The stdio or byte-stream reader's tap.
    Stream(Arc<written::Written>),
    /// The streamable HTTP route's tap, in each request's extensions.
    Http,
}

impl fmt::Debug for GovernedSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GovernedSession")
            .field("agent", &self.agent)
            .field("session", &self.session)
            .finish()
    }
}

impl GovernedSession {
    /// A call's response as the client receives it, a held call's with its page link.
    fn result(&self, response: ToolResponse) -> CallToolResponse {
        let page = match &response {
            ToolResponse::Held(h) => {
                approval_page_link(&self.shared.gateway.handle().load(), &h.interaction_id)
            }
            _ => None,
        };
        call_result_with_page(response, page.as_deref()).into()
    }

    /// The caller of this request: the operator's agent on stdio, else the request's bearer
    /// token's. An HTTP session is bound to the token that opened it.
    pub(super) fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        if let Some(a) = &self.agent {
            return Ok(Caller {
                agent: a.clone(),
                credential: String::from("the stdio client"),
                key: format!("session {}", self.session),
                subagent: None,
                principal: None,
                subject_token: None,
            });
        }
        let auth = ctx
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Authenticated>())
            .ok_or_else(|| {
                ErrorData::invalid_request("the request names no agent (no bearer token)", None)
            })?;
        let opened_by = self.opened_by.get_or_init(|| auth.token.clone());
        if opened_by != &auth.token {
            return Err(ErrorData::invalid_request(
                "this MCP session was opened with another bearer token: a session answers to the token that opened it (open a new session)",
                None,
            ));
        }
        Ok(match (&auth.jwt, &auth.token) {
            (Some(j), Some(key)) => Caller {
                agent: auth.agent.clone(),
                credential: format!(
                    "`{}` of `{}` (client `{}`)",
                    j.principal.subject, j.principal.issuer, j.client
                ),
                key: key.clone(),
                subagent: j.subagent.clone(),
                principal: Some(j.principal.clone()),
                subject_token: Some(j.subject_token.clone()),
            },
            (_, Some(hash)) => Caller {
                agent: auth.agent.clone(),
                credential: self.shared.tokens().credential(hash),
                key: format!("token {hash}"),
                subagent: None,
                principal: None,
                subject_token: None,
            },
            (_, None) => Caller {
                agent: auth.agent.clone(),
                credential: String::from("an unauthenticated loopback client"),
                key: String::from("open"),
                subagent: None,
                principal: None,
                subject_token: None,
            },
        })
    }

    /// The numbers as written of the `tools/call` `ctx` is (R20), taken from the tap; the
    /// reason to refuse the call when the tap lost them.
    fn written(&self, ctx: &RequestContext<RoleServer>) -> Result<NumberLiterals, &'static str> {
        match &self.tap {
            Tap::None => Ok(NumberLiterals::default()),
            Tap::Stream(w) => w.take(&ctx.id).literals(),
            Tap::Http => ctx
                .extensions
                .get::<hyper::http::request::Parts>()
                .and_then(|p| p.extensions.get::<Arc<written::Written>>())
                .map_or(written::Found::Missing, |w| w.take(&ctx.id))
                .literals(),
        }
    }

    pub(super) fn agent(&self, ctx: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
        self.caller(ctx).map(|c| c.agent)
    }
}

impl ServerHandler for GovernedSession {
    #[allow(
        deprecated,
        reason = "logging (SEP-2577): relayed from the upstream servers during a call"
    )]
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .build();
        // Resources, prompts and completion when an upstream has them.
        let (resources, subscribe, prompts, completions) = content::declared(&self.shared.gateway);
        if resources {
            let mut r = rmcp::model::ResourcesCapability::default();
            r.subscribe = subscribe.then_some(true);
            r.list_changed = Some(true);
            capabilities.resources = Some(r);
        }
        if prompts {
            let mut p = rmcp::model::PromptsCapability::default();
            p.list_changed = Some(true);
            capabilities.prompts = Some(p);
        }
        if completions {
            capabilities.completions = Some(Map::new());
        }
        // Held calls are tasks when they are held durably.
        if self.shared.inbox.is_some() {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(rmcp::model::TASKS_EXTENSION_ID.to_owned(), Map::new());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("toolgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools, resources and prompts governed by toolgate: a refused or held call returns a tool result with isError and the reasons; a refused resource read or prompt get is an error whose data.toolgate says why.",
            )
    }

    /// A request rmcp could not read as any method it knows arrives here. One naming a method
    /// toolgate serves came with params that method cannot take: `-32602` (invalid params)
    /// saying which field is wrong, never `-32601` as if the method did not exist.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        Err(unreadable_request(&request))
    }

    /// `subscriptions/listen` (protocol 2026-07-28): what the stream asks for, within what
    /// toolgate advertises.
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(notify::accepted(requested))
    }

    /// One `subscriptions/listen` stream: the changes a session of an older protocol is told
    /// on the session, told on the stream, until it is cancelled.
    async fn listen(
        &self,
        subscription: rmcp::service::SubscriptionContext,
    ) -> Result<(), ErrorData> {
        Box::pin(self.listen_changes(subscription)).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        Box::pin(self.content_list_resources(&ctx)).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Box::pin(self.content_list_templates(&ctx)).await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        Box::pin(self.content_read(request, &ctx))
            .await
            .map(Into::into)
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.content_subscribe(request, &ctx, true)).await
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Box::pin(self.content_subscribe(
            rmcp::model::SubscribeRequestParams::new(request.uri),
            &ctx,
            false,
        ))
        .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        Box::pin(self.content_list_prompts(&ctx)).await
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        Box::pin(self.content_get_prompt(request, &ctx))
            .await
            .map(Into::into)
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        Box::pin(self.content_complete(request, &ctx)).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let agent = self.agent(&ctx)?;
        let reloading = self.shared.reload.read().await;
        let listed = self
            .shared
            .listed(&agent)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
        drop(reloading);
        self.shared.watch(
            &self.session,
            &notify::Notify::Session(ctx.peer.clone()),
            &agent,
            listed.fingerprint,
        );
        // With `mcp.deferred_tools`, the search and call tools instead of the list.
        if self.shared.deferred {
            return Ok(ListToolsResult::with_all_items(deferred::meta_tools()));
        }
        let mut tools = Arc::unwrap_or_clone(listed.tools);
        self.shared.apps_for(&agent, &mut tools).await;
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// `tools/call`: the governed run, boxed. rmcp spawns a task per request holding the
    /// handler's future by value, and tokio copies a spawned future several times; unboxed,
    /// this one made each call's tasks kilobytes to copy.
    ///
    /// A `notifications/cancelled` for the request (rmcp cancels the request's token) drops
    /// the governed run wherever it is: a wait for a person ends `cancelled` (R26), a send
    /// in flight is cancelled upstream with the upstream's own request id
    /// (`notifications/cancelled`), and the audit record says it was cancelled.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.task(request, ctx).await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_held_task(request, ctx).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let cancelled = ctx.ct.clone();
        tokio::select! {
            biased;
            () = cancelled.cancelled() => Err(ErrorData::new(
                rmcp::model::ErrorCode::INTERNAL_ERROR,
                "the client cancelled this call: its wait ended and a send in flight was cancelled upstream",
                None,
            )),
            done = Box::pin(self.governed_call(request, ctx)) => done,
        }
    }

    /// `logging/setLevel`: the floor of the log messages relayed to this session from the
    /// upstream servers during its calls (the servers themselves are shared, never told).
    #[allow(
        deprecated,
        reason = "logging (SEP-2577): what the clients of today's versions send"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        relayed::set_floor(&self.log_level, request);
        Ok(())
    }
}

impl GovernedSession {
    /// A `tools/call` through the governed stack (see [`ServerHandler::call_tool`]).
    async fn governed_call(
        &self,
        mut request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // R20: the arguments' numbers as written, taken (so cleaned up) before anything else.
        let literals = self.written(&ctx);
        let caller = self.caller(&ctx)?;
        let mut literals = match literals {
            Ok(l) => l,
            Err(why) => return Ok(self.result(refused(why.to_owned()))),
        };
        // `mcp.deferred_tools`: a search answers from the agent's exposure (R13); a
        // `tool_call` is unwrapped here and is, from now on, the inner call (R38).
        if self.shared.deferred {
            if request.name == deferred::TOOL_SEARCH {
                return self.search(&caller.agent, &request).await;
            }
            if request.name == deferred::TOOL_CALL {
                match deferred::unwrap_call(request, &literals) {
                    Ok((inner, l)) => {
                        request = inner;
                        literals = l;
                    }
                    Err(malformed) => return Ok(malformed.into_result().into()),
                }
            }
        }
        // A call made while a reload swaps the snapshot waits for the new one, whole.
        drop(self.shared.reload.read().await);
        // `mcp.wire_names: "own"`: the own name is mapped to the qualified one here, and
        // everything after decides by it.
        let name = match self
            .shared
            .wire
            .qualified(&self.shared.gateway, &request.name)
        {
            Ok(name) => name,
            Err(refusal) => return Ok(call_result(ToolResponse::Refused(refusal)).into()),
        };
        let input = Value::Object(request.arguments.unwrap_or_default());
        // R47: the client is asked only for asks routed to `elicitation`, and as its protocol
        // version says it can be: its own declaration, per request from 2026-07-28. A
        // 2026-07-28 client's retry carries its user's answer to the question it was asked.
        let asked = elicit::Asked {
            caller: &caller.key,
            agent: &caller.agent,
            tool: &name,
            input: &input,
            literals: &literals,
        };
        let retry = (
            request.request_state.as_deref(),
            request.input_responses.as_ref(),
        );
        let way = match self.way(&ctx, &asked, retry).await {
            Ok(way) => way,
            Err(why) => return Ok(self.result(refused(why))),
        };
        let mut call = self.tool_call(&caller, &name, &input, &literals);
        let (relay, relayed) = tokio::sync::mpsc::unbounded_channel();
        let token = ctx.meta.get_progress_token();
        call.extensions
            .insert(CallRelay::new(relay, token.is_some()));
        let principal = elicit::Principal {
            credential: caller.credential.clone(),
            agent: caller.agent.clone(),
            session: self.session.clone(),
            verified: caller.principal.clone(),
        };
        let asker = Arc::new(elicit::Asker { way, principal });
        let shared = Arc::clone(&self.shared);
        let run = elicit::ASKER.scope(Arc::clone(&asker), async move { shared.run(call).await });
        let response = relayed::drive(run, relayed, &ctx.peer, token, &self.log_level).await;
        // 2026-07-28 and later: no server-to-client request, and nothing waits. The question
        // goes back as this request's `InputRequiredResult`, kept for the client's retry on
        // any replica; the call ended held.
        let Some(deferred) = asker.deferred() else {
            // A call held in the inbox is a task for a client that takes tasks (SEP-2663),
            // answered from the inbox by any replica.
            if let ToolResponse::Held(held) = &response
                && self.shared.inbox.is_some()
                && tasks::client_takes_tasks(&ctx)
            {
                return Ok(CallToolResponse::Task(tasks::created(held)));
            }
            return Ok(self.result(response));
        };
        Ok(self.input_required(&caller.agent, &asked, deferred).await)
    }

    /// `mcp.deferred_tools`' search, answered from the agent's exposure (R13).
    async fn search(
        &self,
        agent: &str,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        drop(self.shared.reload.read().await);
        let listed = self
            .shared
            .listed(agent)
            .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
        let index = listed
            .search
            .get_or_init(|| deferred::ToolIndex::new(Arc::clone(&listed.tools)));
        Ok(deferred::search_result(index, request.arguments.as_ref()).into())
    }

    /// How the client is asked (R47): by the answer its retry carries to the question it was
    /// asked (`requestState`), not at all, in this request's result, or by a request.
    async fn way(
        &self,
        ctx: &RequestContext<RoleServer>,
        asked: &elicit::Asked<'_>,
        (state, responses): (Option<&str>, Option<&rmcp::model::InputResponses>),
    ) -> Result<elicit::Way, String> {
        if let Some(state) = state {
            self.shared.questions.answer(state, asked, responses).await
        } else if !elicit::declares_form(ctx.client_capabilities().as_ref()) {
            Ok(elicit::Way::Cannot)
        } else if elicit::input_required_era(ctx) {
            Ok(elicit::Way::Defer(Mutex::new(None)))
        } else {
            Ok(elicit::Way::Request(ctx.peer.clone()))
        }
    }

    /// The call the stack decides: by the caller's agent (or subagent), in this session's
    /// next turn, with the numbers as written, the verified principal and the token to
    /// exchange in its extensions.
    fn tool_call(
        &self,
        caller: &Caller,
        name: &str,
        input: &Value,
        literals: &NumberLiterals,
    ) -> ToolCall {
        let turn = self.turns.fetch_add(1, Ordering::Relaxed);
        let agent_ref = match &caller.subagent {
            Some(id) => AgentRef::subagent(&caller.agent, id),
            None => AgentRef::profile(&caller.agent),
        };
        let mut call = ToolCall::new(agent_ref, name, input.clone())
            .in_turn(self.session.clone(), format!("call-{turn}"));
        if !literals.is_empty() {
            call.extensions.insert(literals.clone());
        }
        // What the upstream server sends while it serves this call comes back to this client
        // (only once the stack has let the call through: `crate::relay`).
        // The verified principal behind a JWT, for the audit record and the span.
        if let Some(p) = &caller.principal {
            call.extensions.insert(p.clone());
        }
        // RFC 8693: the caller's verified token, exchanged by a server that takes calls on
        // the caller's behalf (never recorded).
        if let Some(t) = &caller.subject_token {
            call.extensions.insert(t.clone());
        }
        call
    }

    /// The question of a deferred call, kept open for the client's retry (at most the
    /// agent's approval timeout) and sent back as this request's `InputRequiredResult`.
    async fn input_required(
        &self,
        agent: &str,
        asked: &elicit::Asked<'_>,
        deferred: elicit::Deferred,
    ) -> CallToolResponse {
        let gov = self.shared.gateway.handle().load();
        let wait = gov
            .agent(agent)
            .and_then(|a| gov.ask_route(a).timeout)
            .map_or(elicit::QUESTION_OPEN_AT_MOST, |t| {
                t.min(elicit::QUESTION_OPEN_AT_MOST)
            });
        let expires_at = toolgate_inbox::Timestamp::now().saturating_add(wait);
        match self
            .shared
            .questions
            .open(asked, deferred.asked, expires_at)
            .await
        {
            Ok(state) => {
                CallToolResponse::InputRequired(elicit::input_required(deferred.params, state))
            }
            Err(why) => self.result(refused(why)),
        }
    }
}

/// The answer to a request rmcp read as a custom one: for a method toolgate serves, its
/// params did not fit (`-32602`, with serde's reason naming the field); for any other, the
/// method is not served (`-32601`).
#[allow(
    deprecated,
    reason = "logging/setLevel is still served (SEP-2577 deprecates it)"
)]
pub(super) fn unreadable_request(request: &rmcp::model::CustomRequest) -> ErrorData {
    use rmcp::model as m;
    fn reason<T: serde::de::DeserializeOwned>(params: Option<&Value>) -> String {
        match params {
            None => String::from("`params` is missing"),
            Some(p) => match serde_path_to_error::deserialize::<_, T>(p.clone()) {
                Err(e) if e.path().to_string() == "." => e.inner().to_string(),
                Err(e) => format!("`{}`: {}", e.path(), e.inner()),
                Ok(_) => String::from("they are not what the method takes"),
            },
        }
    }
    let params = request.params.as_ref();
    let method = request.method.as_str();
    let why = match method {
        "tools/call" => reason::<m::CallToolRequestParams>(params),
        "resources/read" => reason::<m::ReadResourceRequestParams>(params),
        "resources/subscribe" => reason::<m::SubscribeRequestParams>(params),
        "resources/unsubscribe" => reason::<m::UnsubscribeRequestParams>(params),
        "prompts/get" => reason::<m::GetPromptRequestParams>(params),
        "completion/complete" => reason::<m::CompleteRequestParams>(params),
        "logging/setLevel" => reason::<m::SetLevelRequestParams>(params),
        "initialize" => reason::<m::InitializeRequestParams>(params),
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            reason::<m::PaginatedRequestParams>(params)
        }
        _ => return ErrorData::new(m::ErrorCode::METHOD_NOT_FOUND, method.to_owned(), None),
    };
    ErrorData::invalid_params(
        format!("the `{method}` request's params are malformed: {why}"),
        None,
    )
}
