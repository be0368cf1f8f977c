//! Issue 35 item 4: the inbox reaches PostgreSQL over TLS. Against the CI's server with TLS
//! on and a certificate for `localhost` and 127.0.0.1 signed by `.ci/postgres.sh`'s test CA
//! (`TOOLGATE_PG_TLS_URL`): `verify-full` holds and answers a call over TLS (every connection
//! the inbox opened is TLS, as the server sees it); a root file of another CA is refused
//! naming `sslrootcert`; a host name the certificate does not name is refused under
//! `verify-full` (and taken under `verify-ca`); `sslmode=disable` to a host that is not
//! loopback is refused before connecting; an `sslmode` toolgate does not know is refused
//! naming it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "a test: a failed step fails it"
)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use toolgate::GovernanceHandle;
use toolgate_core::{ToolCall, ToolResponse};
use toolgate_inbox::HeldCalls;
use toolgate_inbox::{Answer, Inbox, InboxErrorKind, State};
use toolgate_inbox_postgres::{PostgresInbox, PostgresOptions, SslMode, Trust};

/// The parts of `TOOLGATE_PG_TLS_URL`: `postgres://USER@HOST:PORT/DB?sslmode=…&sslrootcert=CA`.
struct TlsUrl {
    user: String,
    port: u16,
    db: String,
    ca: PathBuf,
}

impl TlsUrl {
    fn parse(url: &str) -> Self {
        let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
        let (user, rest) = rest.split_once('@').unwrap();
        let (hostport, rest) = rest.split_once('/').unwrap();
        let (db, query) = rest.split_once('?').unwrap();
        let port = hostport.rsplit_once(':').unwrap().1.parse().unwrap();
        let ca = query
            .split('&')
            .find_map(|p| p.strip_prefix("sslrootcert="))
            .expect("the TLS URL names its root file");
        Self {
            user: user.to_owned(),
            port,
            db: db.to_owned(),
            ca: PathBuf::from(ca.replace("%20", " ").replace("%25", "%")),
        }
    }

    /// A URL to `host` (connecting to 127.0.0.1 when `host` is not an address) with `query`.
    fn to(&self, host: &str, query: &str) -> String {
        let addr = if host.parse::<std::net::IpAddr>().is_ok() || host == "localhost" {
            String::new()
        } else {
            String::from("hostaddr=127.0.0.1&")
        };
        format!(
            "postgres://{}@{host}:{}/{}?{addr}{query}",
            self.user, self.port, self.db
        )
    }
}

fn ca_query(ca: &Path) -> String {
    format!("sslrootcert={}", ca.display())
}

/// How many of the server's connections carry `application_name`, and how many of those
/// are TLS (`pg_stat_ssl`), as the server sees them.
async fn connections(admin: &tokio_postgres::Client, application_name: &str) -> (i64, i64) {
    let row = admin
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
            &[&application_name],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// A PEM file holding a CA certificate that did not sign the server's.
fn other_ca() -> tempfile::TempPath {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "not the server's CA");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let file = tempfile::Builder::new().suffix(".pem").tempfile().unwrap();
    std::fs::write(file.path(), cert.pem()).unwrap();
    file.into_temp_path()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue35_verify_full_against_the_test_ca_holds_and_answers_a_call_over_tls() {
    let plain = require_pg!();
    let tls_url = require_pg_tls!();
    let schema = fresh_schema();
    let instance = format!("tls-{schema}");
    let store = PostgresInbox::connect(&tls_url, options(&schema, &instance))
        .await
        .unwrap();
    let t = store.transport();
    assert_eq!((t.mode, t.explicit), (SslMode::VerifyFull, true), "{t}");
    let parts = TlsUrl::parse(&tls_url);
    assert!(
        matches!(&t.trust, Trust::RootFile(p, 1) if *p == parts.ca),
        "only the test CA is trusted: {t}"
    );
    // The waiter's listening connection too.
    let mut notices = store.subscribe().await.unwrap();

    // A call held through a real stack, approved, and sent once when resumed.
    let handle = GovernanceHandle::new(governance());
    let inbox = Inbox::new(store.clone());
    let tool = Tool::default();
    let stack = stack(&handle, &inbox, &tool);
    let id = held(
        &stack,
        ToolCall::new(support(), "refund", json!({"order": "tls-1"})),
    )
    .await;
    assert!(
        tokio::time::timeout(Duration::from_secs(5), notices.next())
            .await
            .unwrap()
            .is_some()
    );
    let waiter = {
        let store = store.clone();
        let id = id.clone();
        tokio::spawn(async move {
            store
                .wait_for(&id, State::Approved, Duration::from_secs(10))
                .await
        })
    };
    store
        .answer(&id, Answer::approve("k-tls", "alice"))
        .await
        .unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().state, State::Approved);
    let resumed = inbox.resume(&id, stack.clone()).await.unwrap();
    assert_eq!(resumed.recorded, Some(State::Done));
    assert!(matches!(resumed.response, ToolResponse::Completed(_)));
    assert_eq!(tool.runs(), 1);

    // As the server sees them: the pool's connections and the listening one, all TLS.
    let admin = raw(&plain, "public").await;
    let (all, tls) = connections(&admin, &format!("toolgate-inbox {instance}")).await;
    assert!(all >= 2, "the pool and the listener: {all} connections");
    assert_eq!(tls, all, "every connection of the inbox is TLS");
    // The check can fail: a plain connection under that name counts as not TLS.
    let (spy, conn) = {
        let mut config: tokio_postgres::Config = plain.parse().unwrap();
        config.application_name(format!("toolgate-inbox {instance}"));
        config.connect(tokio_postgres::NoTls).await.unwrap()
    };
    let driver = tokio::spawn(conn);
    let (all2, tls2) = connections(&admin, &format!("toolgate-inbox {instance}")).await;
    assert_eq!(
        (all2, tls2),
        (all + 1, tls),
        "the plain connection is seen as plain"
    );
    drop(spy);
    let _ = driver.await;

    // The certificate also names 127.0.0.1: verify-full to the address works as well.
    let by_address = parts.to(
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", ca_query(&parts.ca)),
    );
    let again = PostgresInbox::connect(&by_address, options(&schema, &instance))
        .await
        .unwrap();
    assert_eq!(again.get(&id).await.unwrap().unwrap().state, State::Done);
    drop((store, again, inbox));
    drop_schemas(&plain, &[schema]).await;
}

#[tokio::test]
async fn issue35_a_root_file_of_another_ca_is_refused_naming_sslrootcert() {
    let _plain = require_pg!();
    let parts = TlsUrl::parse(&require_pg_tls!());
    let wrong = other_ca();
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = parts.to("localhost", &format!("sslmode={mode}&{}", ca_query(&wrong)));
        let e = PostgresInbox::connect(&url, PostgresOptions::default())
            .await
            .unwrap_err();
        eprintln!("{mode}: {e}");
        assert_eq!(e.kind(), InboxErrorKind::Unavailable, "{e}");
        assert!(
            e.message().contains(&format!(
                "not signed by a CA of sslrootcert `{}`",
                wrong.display()
            )),
            "{mode}: {e}"
        );
        assert!(e.message().contains(&format!("sslmode={mode}")), "{e}");
    }
    // Without `sslmode`, a root file means verify-full even to loopback: refused too, not
    // sent in plain text.
    let url = parts.to("localhost", &ca_query(&wrong));
    let e = PostgresInbox::connect(&url, PostgresOptions::default())
        .await
        .unwrap_err();
    assert!(e.message().contains("sslrootcert"), "{e}");
    // A root file that is not there is named before connecting.
    let url = parts.to(
        "localhost",
        "sslmode=verify-full&sslrootcert=/nonexistent/toolgate-ca.pem",
    );
    let e = PostgresInbox::connect(&url, PostgresOptions::default())
        .await
        .unwrap_err();
    assert!(
        e.message()
            .contains("`sslrootcert` `/nonexistent/toolgate-ca.pem` cannot be read"),
        "{e}"
    );
}

#[tokio::test]
async fn issue35_a_host_name_the_certificate_does_not_name_is_refused_under_verify_full() {
    let plain = require_pg!();
    let parts = TlsUrl::parse(&require_pg_tls!());
    // `toolgate-db.invalid` is what the certificate is checked against; the connection goes
    // to 127.0.0.1 (`hostaddr`).
    let url = parts.to(
        "toolgate-db.invalid",
        &format!("sslmode=verify-full&{}", ca_query(&parts.ca)),
    );
    let e = PostgresInbox::connect(&url, PostgresOptions::default())
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert!(
        e.message()
            .contains("the server's certificate is not for the host the URL names"),
        "{e}"
    );
    assert!(e.message().contains("toolgate-db.invalid"), "{e}");
    // The same server and CA under verify-ca (the chain only) connects: it was the name.
    let schema = fresh_schema();
    let url = parts.to(
        "toolgate-db.invalid",
        &format!("sslmode=verify-ca&{}", ca_query(&parts.ca)),
    );
    let store = PostgresInbox::connect(&url, PostgresOptions::default().schema(&schema))
        .await
        .unwrap();
    assert_eq!(store.transport().mode, SslMode::VerifyCa);
    assert!(
        store.transport().to_string().contains("not checked"),
        "{}",
        store.transport()
    );
    drop(store);
    // `require` without a root file: encrypted, nothing checked (as libpq).
    let url = parts.to("toolgate-db.invalid", "sslmode=require");
    let store = PostgresInbox::connect(&url, PostgresOptions::default().schema(&schema))
        .await
        .unwrap();
    assert_eq!(store.transport().trust, Trust::Unverified);
    drop(store);
    drop_schemas(&plain, &[schema]).await;
}

#[tokio::test]
async fn issue35_sslmode_disable_to_a_host_that_is_not_loopback_is_refused_without_connecting() {
    // Needs no server: it never connects.
    let url = "postgres://toolgate@toolgate-db.invalid:5432/toolgate?sslmode=disable";
    let started = Instant::now();
    let e = PostgresInbox::connect(url, PostgresOptions::default())
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "refused before any look-up or connection"
    );
    assert_eq!(e.kind(), InboxErrorKind::Unavailable);
    for said in [
        "`sslmode=disable`",
        "`toolgate-db.invalid`",
        "not a loopback host",
        "sslmode=verify-full",
        toolgate_inbox_postgres::PLAINTEXT_HOSTS_ENV,
    ] {
        assert!(e.message().contains(said), "{said}: {e}");
    }
    // What would connect instead: the host named as one to reach in plain text.
    let opted = PostgresOptions::default().plaintext_host("toolgate-db.invalid");
    let t = toolgate_inbox_postgres::transport(url, &opted).unwrap();
    assert_eq!((t.mode, &t.trust), (SslMode::Disable, &Trust::Plain));
    // A URL without `sslmode` to that host is TLS (verify-full), never plain text.
    let t = toolgate_inbox_postgres::transport(
        "postgres://toolgate@toolgate-db.invalid/toolgate?sslrootcert=/nonexistent/ca.pem",
        &opted,
    )
    .unwrap_err();
    assert!(t.message().contains("sslrootcert"), "{t}");
}

#[tokio::test]
async fn issue35_an_unknown_or_weak_sslmode_is_an_error_naming_it() {
    let plain = require_pg!();
    for (mode, said) in [
        ("verify_full", "not an SSL mode toolgate knows"),
        ("on", "not an SSL mode toolgate knows"),
        (
            "prefer",
            "fall back to plain text when the server offers no TLS",
        ),
        ("allow", "plain text unless the server insists on TLS"),
    ] {
        // On the real server's plain URL: it would connect were the mode ignored.
        let sep = if plain.contains('?') { '&' } else { '?' };
        let url = format!("{plain}{sep}sslmode={mode}");
        let e = PostgresInbox::connect(&url, PostgresOptions::default())
            .await
            .unwrap_err();
        eprintln!("{e}");
        assert!(e.message().contains(&format!("`sslmode={mode}`")), "{e}");
        assert!(e.message().contains(said), "{e}");
    }
}
