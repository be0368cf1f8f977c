//! What the browser tests share: Debian's `chromium` driven through `chromedriver`
//! (fantoccini), a headless browser per test, and small waits. Included by each browser test
//! file with `#[path = "support/browser.rs"] mod browser_kit;`.

#![allow(dead_code, reason = "each test file uses its own part of the kit")]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

pub(crate) struct Driver {
    child: Child,
    url: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    /// Ends chromedriver and every browser it started: they share its process group (a
    /// browser whose session was never closed — a test that failed before `close` — would
    /// otherwise outlive the test run).
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver on a free loopback port, or says why not.
pub(crate) fn chromedriver() -> Result<(Driver, PathBuf), String> {
    let driver = find_program(&["chromedriver", "chromium-driver"])
        .ok_or("`chromedriver` is not on PATH (apt-get install chromium-driver)")?;
    let browser = find_program(&["chromium", "chromium-browser"])
        .ok_or("`chromium` is not on PATH (apt-get install chromium)")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = Command::new(driver)
        // Its own process group, which the browsers it starts join: see `Drop`.
        .process_group(0)
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
            _profile: profile,
        },
        browser,
    ))
}

pub(crate) async fn browser(driver: &Driver, binary: &Path) -> Client {
    browser_with(driver, binary, &[]).await
}

/// As [`browser`], with `extra` command-line flags for the browser.
pub(crate) async fn browser_with(driver: &Driver, binary: &Path, extra: &[&str]) -> Client {
    let mut caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": binary,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1000",
                format!("--user-data-dir={}", driver._profile.path().display()),
            ]
        }
    });
    if let Some(args) = caps["goog:chromeOptions"]["args"].as_array_mut() {
        args.extend(extra.iter().map(|a| json!(a)));
    }
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    // chromedriver takes a moment to listen: try until it answers (bounded).
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

pub(crate) fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    let path = screenshots().join(name);
    std::fs::write(&path, png).unwrap();
    eprintln!("screenshot: {}", path.display());
}

pub(crate) async fn wait_for(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("`{css}` did not appear: {e}"))
}

/// The text of the first element `css` selects. The page replaces parts of itself as held
/// calls come and go (server-sent events), so an element found may be gone when its text is
/// read: it is looked up again then, until [`WAIT`] has passed.
pub(crate) async fn text(c: &Client, css: &str) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match wait_for(c, css).await.text().await {
            Ok(t) => return t,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the text of `{css}` cannot be read: {e}"),
        }
    }
}

/// The text of `css` once it satisfies `ok` (the page may still show what it showed before
/// a form was sent), or its last text when [`WAIT`] has passed.
pub(crate) async fn text_when(c: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let t = text(c, css).await;
        if ok(&t) || std::time::Instant::now() >= deadline {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn click(c: &Client, css: &str) {
    wait_for(c, css).await.click().await.unwrap();
}

/// The driver and the browser binary, or `None` (the test skips, loudly) when either is
/// missing — except under `CI=true`, where a browser test that cannot run fails.
pub(crate) fn chromedriver_or_skip(test: &str) -> Option<(Driver, PathBuf)> {
    match chromedriver() {
        Ok(d) => Some(d),
        Err(why) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and the browser test cannot run: {why}");
            }
            eprintln!("\n*** SKIPPED {test}: {why} ***\n");
            None
        }
    }
}
