//! Where a session's change notifications go (serve.md): the session itself, for clients of
//! protocol versions before 2026-07-28, or a `subscriptions/listen` stream of a 2026-07-28
//! client, which gets only what it asked for and the server accepted, each notification
//! tagged with the stream's id. `tools/list_changed` (the agent's own list changed),
//! `resources/list_changed`, `prompts/list_changed` and `resources/updated` (a resource the
//! agent may still read) go through the same registries either way.

use rmcp::model::SubscriptionFilter;
use rmcp::service::{SubscriptionContext, SubscriptionSink};

use super::*;

/// Where one session's notifications go.
#[derive(Clone)]
pub(super) enum Notify {
    /// On the session (protocol versions before 2026-07-28).
    Session(Peer<RoleServer>),
    /// On a `subscriptions/listen` stream (2026-07-28): removed when the stream ends.
    Listen(SubscriptionSink),
}

impl Notify {
    /// Whether nobody is there any more (a stream is removed when it ends instead).
    pub(super) fn closed(&self) -> bool {
        match self {
            Notify::Session(p) => p.is_transport_closed(),
            Notify::Listen(_) => false,
        }
    }

    /// `notifications/tools/list_changed`.
    pub(super) async fn tools_changed(&self) {
        let _ = match self {
            Notify::Session(p) => p.notify_tool_list_changed().await.is_ok(),
            Notify::Listen(s) => s.notify_tool_list_changed().await.is_ok(),
        };
    }

    /// `notifications/resources/list_changed`.
    pub(super) async fn resources_changed(&self) {
        let _ = match self {
            Notify::Session(p) => p.notify_resource_list_changed().await.is_ok(),
            Notify::Listen(s) => s.notify_resource_list_changed().await.is_ok(),
        };
    }

    /// `notifications/prompts/list_changed`.
    pub(super) async fn prompts_changed(&self) {
        let _ = match self {
            Notify::Session(p) => p.notify_prompt_list_changed().await.is_ok(),
            Notify::Listen(s) => s.notify_prompt_list_changed().await.is_ok(),
        };
    }

    /// `notifications/resources/updated` for `uri`.
    pub(super) async fn resource_updated(&self, uri: &str) {
        let _ = match self {
            Notify::Session(p) => p
                .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri))
                .await
                .is_ok(),
            Notify::Listen(s) => s.notify_resource_updated(uri).await.is_ok(),
        };
    }
}

/// What a `subscriptions/listen` request may have: everything toolgate advertises (rmcp
/// intersects it with the capabilities of `get_info`); each resource URI is checked against
/// the agent's rights when the stream starts, and again before every update.
pub(super) fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    requested.clone()
}

impl GovernedSession {
    /// One `subscriptions/listen` stream, until the client cancels it or the session ends:
    /// registered where the session's own notifications would be, under a key of its own,
    /// and removed (upstream resource subscriptions released) when it ends.
    pub(super) async fn listen_changes(
        &self,
        subscription: SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let ctx = subscription.request_context();
        let agent = self.agent(ctx)?;
        let key = format!(
            "{}#listen-{}",
            self.session,
            subscription.sink().id().clone().into_json_value()
        );
        let to = Notify::Listen(subscription.sink().clone());
        let accepted = subscription.accepted().clone();
        if accepted.tools_list_changed == Some(true) {
            let seen = self.shared.listed(&agent).map_or(0, |l| l.fingerprint);
            self.shared.watch(&key, &to, &agent, seen);
        }
        if accepted.resources_list_changed == Some(true)
            || accepted.prompts_list_changed == Some(true)
        {
            self.shared.listen(&key, &to);
        }
        for uri in accepted.resource_subscriptions.iter().flatten() {
            // Refused like `resources/subscribe` (audited); a refused URI is never notified.
            if let Err(e) = self.subscribe_uri(&agent, &key, &to, uri.clone()).await {
                tracing::info!(target: "toolgate_mcp::serve", agent = agent.as_str(), "a subscriptions/listen resource was refused: {}", e.message);
            }
        }
        subscription.cancelled().await;
        self.shared.forget_listener(&key).await;
        Ok(())
    }
}

impl Shared {
    /// Removes every registration of `key` (a `subscriptions/listen` stream that ended):
    /// its list watches, its content listening, its resource subscriptions (the upstream
    /// told when nobody else listens to a resource).
    pub(super) async fn forget_listener(&self, key: &str) {
        lock(&self.watched).retain(|x| x.session != key);
        lock(&self.content.listeners).retain(|(s, _)| s != key);
        let uris: Vec<String> = lock(&self.content.subscriptions)
            .iter()
            .filter(|s| s.session == key)
            .map(|s| s.uri.clone())
            .collect();
        for uri in uris {
            self.unsubscribe_uri(key, &uri).await;
        }
    }
}
