//! Counts the engine's input-bounds walks (R14: a call is decided once) through the trace
//! event the engine writes at each walk (target `toolgate_engine::input_bounds`). One
//! subscriber for the whole test binary (a thread's own would leave the event's cached
//! interest to whichever thread came first), counting per thread: a test that uses it runs
//! on a current-thread runtime.

use std::cell::Cell;
use std::sync::Once;

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The engine's trace target of one input-bounds walk.
const TARGET: &str = "toolgate_engine::input_bounds";

thread_local! {
    static WALKS: Cell<usize> = const { Cell::new(0) };
}

/// Counts each thread's walks.
struct Walks;

impl Subscriber for Walks {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == TARGET
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if event.metadata().target() == TARGET {
            WALKS.with(|w| w.set(w.get() + 1));
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The input-bounds walks this thread has made (the first call in the process sets the
/// counting subscriber: ask before the call you count).
pub(crate) fn input_bounds_walks() -> usize {
    static SET: Once = Once::new();
    SET.call_once(|| {
        tracing::subscriber::set_global_default(Walks).expect("the test binary's only subscriber");
    });
    WALKS.with(Cell::get)
}
