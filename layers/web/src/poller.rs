//! The poller: watches the store's change feed and tells the open pages what changed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;
use toolgate_inbox::{HeldRecord, InboxStore, Timestamp};

/// How far back each look at the change feed reaches before the last change it saw: a
/// change stamped a little earlier (another writer's clock, a commit that took its time)
/// is still seen, once.
pub(crate) const OVERLAP: Duration = Duration::from_secs(2);

/// How many changes one look reads; more are read at the next look.
pub(crate) const BATCH: usize = 1_000;

/// The moment the page starts from: changes at or after it are news.
pub(crate) fn prime() -> Timestamp {
    Timestamp::now()
}

/// One look at the change feed after `since` (each change once, by id and `updated_at`).
pub(crate) struct Feed {
    pub(crate) since: Timestamp,
    pub(crate) floor: Timestamp,
    pub(crate) seen: HashMap<String, i64>,
}

impl Feed {
    pub(crate) fn new(start: Timestamp) -> Self {
        Self {
            since: start,
            floor: start,
            seen: HashMap::new(),
        }
    }

    pub(crate) async fn look(&mut self, store: &dyn InboxStore) -> Option<Vec<HeldRecord>> {
        let mut from = self.since.saturating_sub(OVERLAP).max(self.floor);
        let mut news = Vec::new();
        // A burst of more than a batch is read on, batch after batch, from the last change
        // read (so a window full of changes already seen never hides the later ones).
        for _ in 0..64 {
            let changed = store.changed_since(from, BATCH).await.ok()?;
            let full = changed.len() == BATCH;
            let last = changed.last().map(|r| r.updated_at);
            for r in changed {
                let stamp = r.updated_at.as_millis();
                if self.seen.get(r.id()) == Some(&stamp) {
                    continue;
                }
                self.seen.insert(r.id().to_owned(), stamp);
                if r.updated_at > self.since {
                    self.since = r.updated_at;
                }
                news.push(r);
            }
            match last {
                Some(last) if full => {
                    // Past a millisecond holding a whole batch, its rest is skipped.
                    from = if last > from {
                        last
                    } else {
                        last.saturating_add(Duration::from_millis(1))
                    };
                }
                _ => break,
            }
        }
        let keep = self.since.saturating_sub(OVERLAP).as_millis();
        self.seen.retain(|_, stamp| *stamp >= keep);
        Some(news)
    }
}

pub(crate) fn spawn_poller(
    store: Arc<dyn InboxStore>,
    every: Duration,
    wake: Option<Arc<Notify>>,
    primed: Option<Timestamp>,
    tx: watch::Sender<u64>,
    deltas: broadcast::Sender<Arc<HeldRecord>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut feed = Feed::new(primed.unwrap_or_else(prime));
        loop {
            // A wake-up (a store's change notice, e.g. PostgreSQL's LISTEN) looks at once;
            // the interval is the fallback.
            match &wake {
                Some(w) => {
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        () = w.notified() => {}
                    }
                }
                None => tokio::time::sleep(every).await,
            }
            let Some(news) = feed.look(&*store).await else {
                continue;
            };
            if news.is_empty() {
                continue;
            }
            for r in news {
                // No receiver (no page open) is not an error.
                let _ = deltas.send(Arc::new(r));
            }
            tx.send_modify(|v| *v = v.wrapping_add(1));
        }
    })
}
