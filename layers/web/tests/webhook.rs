//! The optional webhook: one JSON POST per new held call with the interaction's fields and a
//! link to its card, retried after a failure, never in the gate's way.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads one HTTP request; its body.
async fn read_request(conn: &mut tokio::net::TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await.unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let len: usize = text[..head_end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if buf.len() >= head_end + 4 + len {
                return text[head_end + 4..head_end + 4 + len].to_owned();
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test]
async fn a_new_held_call_is_posted_to_the_webhook_and_retried_after_a_failure() {
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", receiver.local_addr().unwrap());
    let gov = governance_tweaked("token", |c| {
        c["approvers"]["webhook"] = json!(url);
        c["approvers"]["public_url"] = json!("http://approvals.example.invalid/");
    });
    let s = start_gov(gov, Duration::from_millis(50)).await;
    // The page is up (a held call from before it started is not announced).
    assert_eq!(s.client().get("/login").await.status, 200);
    // The gate answers at once, whatever the receiver does.
    let id = s.hold_refund(json!({"order": "A-1"})).await;
    // First delivery: answered 500, so it is tried again.
    let (mut conn, _) = tokio::time::timeout(Duration::from_secs(60), receiver.accept())
        .await
        .unwrap()
        .unwrap();
    let first = read_request(&mut conn).await;
    conn.write_all(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    drop(conn);
    let (mut conn, _) = tokio::time::timeout(Duration::from_secs(60), receiver.accept())
        .await
        .unwrap()
        .unwrap();
    let second = read_request(&mut conn).await;
    conn.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    drop(conn);
    assert_eq!(first, second, "the retry posts the same body");
    let body: Value = serde_json::from_str(&second).unwrap();
    assert_eq!(body["id"], id);
    assert_eq!(body["event"], "held");
    assert_eq!(body["prompt"], "Approve refund?");
    assert_eq!(body["tool"], "refund");
    assert_eq!(body["agent"], "support");
    assert_eq!(body["input"], json!({"order": "A-1"}));
    assert_eq!(
        body["link"],
        format!("http://approvals.example.invalid/calls/{id}")
    );
    assert!(body["reasons"][0]["source"].is_string());
    // Delivered: nothing more is posted for it.
    let again = tokio::time::timeout(Duration::from_millis(500), receiver.accept()).await;
    assert!(again.is_err(), "a delivered call is posted once");
}
