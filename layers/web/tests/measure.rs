//! Figures, not assertions: the pending page with 1,000 held calls, and answer latency.
//! Run with `cargo test -p toolgate-web --test measure -- --ignored --nocapture`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a timed run for the figures in the report; prints, asserts nothing about time"]
async fn measure_page_load_with_1000_pending_and_answer_latency() {
    let s = start_with("token", Duration::from_secs(3600)).await;
    let c = signed_in(&s, ALICE).await;
    let held = Instant::now();
    let mut ids = Vec::new();
    for n in 0..1000 {
        let session = format!("sess-{}", n % 20);
        let turn = format!("turn-{}", n % 7);
        ids.push(
            s.hold(
                toolgate::core::ToolCall::new(
                    toolgate::core::AgentRef::profile("support"),
                    "refund",
                    json!({"order": format!("A-{n}"), "amount": n, "note": "<b>escaped</b>"}),
                )
                .in_turn(session, turn),
            )
            .await,
        );
    }
    eprintln!("held 1000 calls through the gate in {:?}", held.elapsed());
    let mut loads = Vec::new();
    let mut bytes = 0;
    for _ in 0..7 {
        let t = Instant::now();
        let page = c.get("/").await;
        loads.push(t.elapsed());
        assert_eq!(page.status, 200);
        assert!(page.body.contains("id=\"pending-count\">1000<"));
        bytes = page.body.len();
    }
    eprintln!(
        "GET / with 1000 pending: median {:?}, min {:?}, max {:?}, {} KiB of HTML",
        median(loads.clone()),
        loads.iter().min().unwrap(),
        loads.iter().max().unwrap(),
        bytes / 1024
    );
    let csrf = c.csrf().await;
    let mut answers = Vec::new();
    for (i, id) in ids.iter().take(50).enumerate() {
        let rec = s.inbox.store().get(id).await.unwrap().unwrap();
        let key = format!("k{i}");
        let t = Instant::now();
        let r = c
            .post(
                &format!("/calls/{id}/answer"),
                &[
                    ("csrf", &csrf),
                    ("decision", "approve"),
                    ("idempotency_key", &key),
                    ("input_hash", &rec.call.input_hash),
                    ("definition_hash", &rec.call.definition_hash),
                ],
            )
            .await;
        answers.push(t.elapsed());
        assert_eq!(r.status, 303, "{}", r.body);
    }
    eprintln!(
        "POST an approval (950+ pending): median {:?}, max {:?} over 50",
        median(answers.clone()),
        answers.iter().max().unwrap()
    );
}
