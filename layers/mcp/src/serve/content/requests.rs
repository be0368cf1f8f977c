//! The session's resource, prompt and completion requests, each decided for its agent
//! before anything is sent upstream, audited and traced (serve.md, "Resources, prompts and
//! completion, governed").

use super::*;

impl GovernedSession {
    /// Sends `request` to `server` — on behalf of the caller when the server has a token
    /// exchange (RFC 8693: the caller's exchanged token, never the connection's) — and its
    /// result. A request that cannot have its caller's token is not sent.
    async fn send_for(
        &self,
        ctx: &RequestContext<RoleServer>,
        server: &str,
        peer: &rmcp::Peer<rmcp::RoleClient>,
        mut request: rmcp::model::ClientRequest,
    ) -> Result<rmcp::model::ServerResult, ErrorData> {
        use rmcp::model::GetExtensions as _;
        let subject = self.caller(ctx)?.subject_token;
        self.shared
            .gateway
            .on_behalf(server, subject.as_ref(), request.extensions_mut())
            .await
            .map_err(|why| {
                ErrorData::invalid_request(
                    format!(
                        "toolgate did not send the request to MCP server `{server}`: it is made on behalf of its caller, and {why}"
                    ),
                    None,
                )
            })?;
        crate::service::send_cancel_on_drop(peer, request, |_| {})
            .await
            .map_err(|e| upstream_error(server, e))
    }

    pub(crate) fn record(
        &self,
        agent: &str,
        event: &str,
        server: &str,
        name: &str,
        extra: Map<String, Value>,
        verdict: &Result<(), Refused>,
    ) -> bool {
        // A request for something no server lists names it as asked.
        let name = match server.is_empty() {
            true => name.to_owned(),
            false => format!("{server}__{name}"),
        };
        let time = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
        let mut record = AuditEvent::new(time, event)
            .with("agent", agent)
            .with("session", self.session.as_str())
            .with("server", server)
            .with("name", name);
        record.fields.extend(extra);
        let record = match verdict {
            Ok(()) => record.with("outcome", "allowed"),
            Err((code, reason)) => record
                .with("outcome", "refused")
                .with("code", code.to_string())
                .with("reasons", vec![Value::from(reason.as_str())]),
        };
        self.shared.content_record(record)
    }

    /// Decides, audits and traces one request about `name` of `server`; `Ok` to send it.
    pub(crate) fn decide(
        &self,
        agent: &str,
        event: &str,
        what: &str,
        (server, name): (&str, &str),
        resource: bool,
        extra: Map<String, Value>,
    ) -> Result<(), ErrorData> {
        let span = tracing::info_span!(
            target: "toolgate_mcp::content",
            "toolgate.mcp.content",
            event,
            agent,
            server,
            name = format!("{server}__{name}").as_str(),
            outcome = tracing::field::Empty,
        );
        let _entered = span.enter();
        let verdict = self.shared.content_verdict(agent, server, name, resource);
        span.record(
            "outcome",
            if verdict.is_ok() {
                "allowed"
            } else {
                "refused"
            },
        );
        if !self.record(agent, event, server, name, extra, &verdict) {
            return Err(audit_failed(what));
        }
        verdict.map_err(|_| hidden(what))
    }

    /// A request about something no server lists (or lists ambiguously): audited with the
    /// true reason like every other refusal, and answered as [`hidden`].
    pub(crate) fn refuse_unlisted(
        &self,
        agent: &str,
        event: &str,
        what: &str,
        asked: &str,
        extra: Map<String, Value>,
        refused: Refused,
    ) -> ErrorData {
        if !self.record(agent, event, "", asked, extra, &Err(refused)) {
            return audit_failed(what);
        }
        hidden(what)
    }

    /// The server and name of the resource `uri`, or the refusal of a request about a URI
    /// no server offers: audited as `event`, answered as a hidden one ([`hidden`]).
    async fn resource_owner(
        &self,
        agent: &str,
        event: &str,
        what: &str,
        uri: &str,
        extra: &Map<String, Value>,
    ) -> Result<(String, String, Peer<RoleClient>), ErrorData> {
        match self.shared.owner_of(uri).await {
            Ok(o) => Ok(o),
            Err(r) => {
                let asked = self.redacted_uri(uri);
                let asked = asked.as_str().unwrap_or_default();
                Err(self.refuse_unlisted(agent, event, what, asked, extra.clone(), r))
            }
        }
    }

    pub(crate) fn redacted_uri(&self, uri: &str) -> Value {
        Value::String(self.shared.content.redactor.redact_text(uri))
    }

    pub(crate) async fn content_list_resources(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let agent = self.agent(ctx)?;
        self.shared
            .listen(&self.session, &notify::Notify::Session(ctx.peer.clone()));
        let mut out = Vec::new();
        for (id, peer, _) in self.shared.offering(|c| c.resources.is_some()) {
            let cat = self.shared.catalog(&id, &peer).await;
            for r in &cat.resources {
                if self
                    .shared
                    .content_verdict(&agent, &id, &r.name, true)
                    .is_ok()
                {
                    let mut r = r.clone();
                    r.name = self.shared.wire_name(&id, &r.name);
                    out.push(r);
                }
            }
        }
        Ok(ListResourcesResult::with_all_items(out))
    }

    pub(crate) async fn content_list_templates(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let agent = self.agent(ctx)?;
        self.shared
            .listen(&self.session, &notify::Notify::Session(ctx.peer.clone()));
        let mut out = Vec::new();
        for (id, peer, _) in self.shared.offering(|c| c.resources.is_some()) {
            let cat = self.shared.catalog(&id, &peer).await;
            for t in &cat.templates {
                if self
                    .shared
                    .content_verdict(&agent, &id, &t.name, true)
                    .is_ok()
                {
                    let mut t = t.clone();
                    t.name = self.shared.wire_name(&id, &t.name);
                    out.push(t);
                }
            }
        }
        Ok(ListResourceTemplatesResult::with_all_items(out))
    }

    pub(crate) async fn content_read(
        &self,
        request: ReadResourceRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let agent = self.agent(ctx)?;
        let uri = request.uri.clone();
        let what = "the resource read";
        let mut extra = Map::new();
        extra.insert("uri".into(), self.redacted_uri(&uri));
        let (server, name, peer) = self
            .resource_owner(&agent, "mcp_resource_read", what, &uri, &extra)
            .await?;
        self.decide(
            &agent,
            "mcp_resource_read",
            what,
            (&server, &name),
            true,
            extra,
        )?;
        let request = rmcp::model::ClientRequest::ReadResourceRequest(
            rmcp::model::ReadResourceRequest::new(ReadResourceRequestParams::new(uri)),
        );
        match self.send_for(ctx, &server, &peer, request).await? {
            rmcp::model::ServerResult::ReadResourceResult(mut r) => {
                complete(&mut r.result_type);
                Ok(r)
            }
            _ => Err(upstream_error(
                &server,
                rmcp::ServiceError::UnexpectedResponse,
            )),
        }
    }

    pub(crate) async fn content_subscribe(
        &self,
        request: SubscribeRequestParams,
        ctx: &RequestContext<RoleServer>,
        subscribe: bool,
    ) -> Result<(), ErrorData> {
        let agent = self.agent(ctx)?;
        if !subscribe {
            // Leaving is always allowed; the upstream is told when nobody else listens.
            self.shared
                .unsubscribe_uri(&self.session, &request.uri)
                .await;
            return Ok(());
        }
        let to = notify::Notify::Session(ctx.peer.clone());
        self.subscribe_uri(&agent, &self.session, &to, request.uri)
            .await
    }

    /// Subscribes `key` (this session, or one of its `subscriptions/listen` streams) to the
    /// updates of `uri`, as `agent` may (the resource's owner found and the content policy
    /// decided, audited as `mcp_resource_subscribe`); the upstream is subscribed for the
    /// first listener.
    pub(in crate::serve) async fn subscribe_uri(
        &self,
        agent: &str,
        key: &str,
        to: &notify::Notify,
        uri: String,
    ) -> Result<(), ErrorData> {
        let what = "the subscription";
        let mut extra = Map::new();
        extra.insert("uri".into(), self.redacted_uri(&uri));
        let (server, name, peer) = self
            .resource_owner(agent, "mcp_resource_subscribe", what, &uri, &extra)
            .await?;
        self.decide(
            agent,
            "mcp_resource_subscribe",
            what,
            (&server, &name),
            true,
            extra,
        )?;
        let first = {
            let mut subs = lock(&self.shared.content.subscriptions);
            subs.retain(|s| !s.to.closed());
            let first = !subs.iter().any(|s| s.server == server && s.uri == uri);
            if !subs.iter().any(|s| s.session == key && s.uri == uri) {
                subs.push(Subscription {
                    session: key.to_owned(),
                    agent: agent.to_owned(),
                    to: to.clone(),
                    server: server.clone(),
                    name: name.clone(),
                    uri: uri.clone(),
                });
            }
            first
        };
        if first {
            #[allow(deprecated, reason = "resources/subscribe: what today's servers take")]
            peer.subscribe(SubscribeRequestParams::new(uri))
                .await
                .map_err(|e| upstream_error(&server, e))?;
        }
        Ok(())
    }

    pub(crate) async fn content_list_prompts(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let agent = self.agent(ctx)?;
        self.shared
            .listen(&self.session, &notify::Notify::Session(ctx.peer.clone()));
        let mut out = Vec::new();
        for (id, peer, _) in self.shared.offering(|c| c.prompts.is_some()) {
            let cat = self.shared.catalog(&id, &peer).await;
            for p in &cat.prompts {
                if self
                    .shared
                    .content_verdict(&agent, &id, &p.name, false)
                    .is_ok()
                {
                    let mut p = p.clone();
                    p.name = self.shared.wire_name(&id, &p.name);
                    out.push(p);
                }
            }
        }
        Ok(ListPromptsResult::with_all_items(out))
    }

    pub(crate) async fn content_get_prompt(
        &self,
        request: GetPromptRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetPromptResult, ErrorData> {
        let agent = self.agent(ctx)?;
        let what = "the prompt";
        let (server, name, peer) = match self.shared.prompt_owner(&request.name).await {
            Ok(o) => o,
            Err(r) => {
                return Err(self.refuse_unlisted(
                    &agent,
                    "mcp_prompt_get",
                    what,
                    &request.name,
                    Map::new(),
                    r,
                ));
            }
        };
        let mut extra = Map::new();
        if let Some(args) = &request.arguments {
            extra.insert(
                "arguments".into(),
                self.shared
                    .content
                    .redactor
                    .redact_value(&format!("{server}__{name}"), &Value::Object(args.clone())),
            );
        }
        self.decide(
            &agent,
            "mcp_prompt_get",
            what,
            (&server, &name),
            false,
            extra,
        )?;
        let mut upstream = GetPromptRequestParams::new(name);
        upstream.arguments = request.arguments;
        let request = rmcp::model::ClientRequest::GetPromptRequest(
            rmcp::model::GetPromptRequest::new(upstream),
        );
        match self.send_for(ctx, &server, &peer, request).await? {
            rmcp::model::ServerResult::GetPromptResult(mut r) => {
                complete(&mut r.result_type);
                Ok(r)
            }
            _ => Err(upstream_error(
                &server,
                rmcp::ServiceError::UnexpectedResponse,
            )),
        }
    }

    pub(crate) async fn content_complete(
        &self,
        request: CompleteRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let agent = self.agent(ctx)?;
        let what = "the completion";
        let mut extra = Map::new();
        extra.insert(
            "argument".into(),
            json!({"name": request.argument.name,
                   "value": self.shared.content.redactor.redact_text(&request.argument.value)}),
        );
        let mut upstream = request.clone();
        let (server, name, peer, resource) = match &request.r#ref {
            Reference::Prompt(p) => {
                let (server, name, peer) = match self.shared.prompt_owner(&p.name).await {
                    Ok(o) => o,
                    Err(r) => {
                        return Err(self.refuse_unlisted(
                            &agent,
                            "mcp_completion",
                            what,
                            &p.name,
                            extra,
                            r,
                        ));
                    }
                };
                upstream.r#ref = Reference::for_prompt(name.clone());
                (server, name, peer, false)
            }
            Reference::Resource(r) => {
                let mut found = None;
                for (id, peer, _) in self.shared.offering(|c| c.resources.is_some()) {
                    let cat = self.shared.catalog(&id, &peer).await;
                    if let Some(t) = cat.templates.iter().find(|t| t.uri_template == r.uri) {
                        found = Some((id.clone(), t.name.clone(), peer.clone(), true));
                        break;
                    }
                }
                extra.insert("uri".into(), self.redacted_uri(&r.uri));
                match found {
                    Some(f) => f,
                    None => {
                        let asked = self.redacted_uri(&r.uri);
                        let asked = asked.as_str().unwrap_or_default().to_owned();
                        return Err(self.refuse_unlisted(
                            &agent,
                            "mcp_completion",
                            what,
                            &asked,
                            extra,
                            (
                                RefusalCode::UnknownTool,
                                format!("no upstream server lists the resource template `{asked}`"),
                            ),
                        ));
                    }
                }
            }
            _ => {
                return Err(ErrorData::invalid_params(
                    "toolgate refused the completion: its reference is neither a prompt nor a resource template",
                    None,
                ));
            }
        };
        self.decide(
            &agent,
            "mcp_completion",
            what,
            (&server, &name),
            resource,
            extra,
        )?;
        let offers = self
            .shared
            .gateway
            .upstream(&server)
            .and_then(|(_, c)| c)
            .is_some_and(|c| c.completions.is_some());
        if !offers {
            return Ok(CompleteResult::default());
        }
        let request = rmcp::model::ClientRequest::CompleteRequest(
            rmcp::model::CompleteRequest::new(upstream),
        );
        match self.send_for(ctx, &server, &peer, request).await? {
            rmcp::model::ServerResult::CompleteResult(mut r) => {
                complete(&mut r.result_type);
                Ok(r)
            }
            _ => Err(upstream_error(
                &server,
                rmcp::ServiceError::UnexpectedResponse,
            )),
        }
    }
}

/// What a caller is told when it may not have what it asked for: one answer whatever the
/// reason — not allowed, withheld as confidential, egress on an air-gapped host, or listed
/// by no server at all — so a refusal tells nothing about which hidden resources and
/// prompts exist. The audit record keeps the true code and reason.
pub(crate) fn hidden(what: &str) -> ErrorData {
    refusal_error(
        what,
        &(
            RefusalCode::NotAllowed,
            String::from("it is not one this agent may use, or nothing by that name is offered"),
        ),
    )
}

fn audit_failed(what: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("toolgate refused {what}: the audit record could not be written"),
        None,
    )
}

/// An upstream result is answered downstream as `toolgate`'s own: an upstream that spoke an
/// older protocol sends no `resultType`, which a client of protocol 2026-07-28 requires
/// (SEP-2322; the official Python SDK refuses the result without it). rmcp's server side
/// clears it again for a client of an older version.
fn complete(result_type: &mut Option<rmcp::model::ResultType>) {
    if result_type.is_none() {
        *result_type = Some(rmcp::model::ResultType::COMPLETE);
    }
}

pub(crate) fn upstream_error(server: &str, e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(mut data) => {
            data.message = format!("MCP server `{server}`: {}", data.message).into();
            data
        }
        other => ErrorData::internal_error(
            format!("MCP server `{server}` did not answer: {other}"),
            None,
        ),
    }
}
