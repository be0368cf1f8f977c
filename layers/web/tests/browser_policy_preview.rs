//! The policy tab's preview in a real browser (Debian's `chromium` through `chromium-driver`,
//! as `browser.rs` drives it): a rule filled in, **Preview** shows what the change would do to
//! the calls the audit file recorded (R46) and saves nothing, then **Save policy** saves it.
//! A screenshot goes to `target/screenshots/policy-preview.png`.
//!
//! Without `chromium` and `chromedriver` the test skips loudly, except under `CI=true`, where
//! it fails.

mod common;
#[path = "support/recorded.rs"]
mod recorded;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use toolgate_inbox::InboxStore;

const WAIT: Duration = Duration::from_secs(60);

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

struct Driver {
    child: Child,
    url: String,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chromedriver() -> Result<(Driver, PathBuf), String> {
    let driver = find_program(&["chromedriver", "chromium-driver"])
        .ok_or("`chromedriver` is not on PATH (apt-get install chromium-driver)")?;
    let browser = find_program(&["chromium", "chromium-browser"])
        .ok_or("`chromium` is not on PATH (apt-get install chromium)")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start chromedriver: {e}"))?;
    let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
    Ok((
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            profile,
        },
        browser,
    ))
}

async fn browser(driver: &Driver, binary: &Path) -> Client {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": binary,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1000",
                format!("--user-data-dir={}", driver.profile.path().display()),
            ]
        }
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let mut last = String::new();
    for _ in 0..120 {
        match ClientBuilder::new(connector.clone())
            .capabilities(caps.clone())
            .connect(&driver.url)
            .await
        {
            Ok(c) => return c,
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "chromedriver at {} did not start a browser: {last}",
        driver.url
    );
}

async fn wait_for(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("`{css}` did not appear: {e}"))
}

async fn text(c: &Client, css: &str) -> String {
    wait_for(c, css).await.text().await.unwrap()
}

async fn click(c: &Client, css: &str) {
    wait_for(c, css).await.click().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_r46_preview_a_policy_change_then_save_it() {
    let (driver, binary) = match chromedriver() {
        Ok(d) => d,
        Err(why) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and the browser test cannot run: {why}");
            }
            eprintln!(
                "\n*** SKIPPED browser_r46_preview_a_policy_change_then_save_it: {why} ***\n"
            );
            return;
        }
    };
    let (s, _dir) = recorded::recorded().await;
    let c = browser(&driver, &binary).await;

    c.goto(&format!("{}/login", s.base)).await.unwrap();
    wait_for(&c, "#token").await.send_keys(ALICE).await.unwrap();
    click(&c, "#sign-in").await;
    assert_eq!(text(&c, "#who").await, "alice");

    click(&c, "#tab-policy").await;
    click(&c, "#add-rule").await;
    wait_for(&c, "#in-effect")
        .await
        .select_by_value("deny")
        .await
        .unwrap();
    wait_for(&c, "#in-tool")
        .await
        .send_keys("lookup")
        .await
        .unwrap();
    wait_for(&c, "#in-when")
        .await
        .send_keys(r#"{"q": {"gt": 2}}"#)
        .await
        .unwrap();
    click(&c, "#preview-rule").await;
    assert_eq!(
        text(&c, "#preview-summary").await,
        "This change over the last 8 recorded calls: 3 would now be refused, 0 asked, 0 run."
    );
    assert_eq!(text(&c, "#preview-refused").await, "3");
    let rows = c
        .find_all(Locator::Css("#preview-changes tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let png = c.screenshot().await.unwrap();
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    std::fs::write(shots.join("policy-preview.png"), png).unwrap();
    assert!(
        s.inbox.store().get_policy().await.unwrap().is_none(),
        "a preview saves nothing"
    );

    // The panel still holds the rule: save it.
    click(&c, "#save-rule").await;
    assert!(text(&c, "#banner").await.starts_with("Saved"));
    let stored = s.inbox.store().get_policy().await.unwrap().unwrap();
    assert!(stored.body.contains("lookup"), "{}", stored.body);
    c.close().await.unwrap();
}
