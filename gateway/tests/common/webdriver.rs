//! A minimal W3C WebDriver client over the hyper client: headless Chromium through `/usr/bin/chromedriver`,
//! for the console's browser tests. Without Chromium a test skips with a message, unless `CI` is set (then it
//! fails).

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::send;

/// A Chromium session driven through chromedriver.
pub struct Driver {
    /// chromedriver, leading the group Chromium and its helpers join: dropping the driver ends them all, also
    /// when the test fails.
    _process: tower_chat_testkit::ProcessGroup,
    base: String,
    /// The WebDriver session id.
    pub session: String,
    shots: std::path::PathBuf,
    _profile: tempfile::TempDir,
}

/// An element found by its text, with what was read of it before the page could replace it.
pub struct Read {
    /// The element reference (it may go stale later on a live page).
    pub element: String,
    /// Its text.
    pub text: String,
    /// The attribute asked for, if it was and the element has it.
    pub attribute: Option<String>,
}

/// The key of a WebDriver element reference (to pass an element as a script argument).
pub const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
const ELEMENT: &str = ELEMENT_KEY;

impl Driver {
    /// Chromium and chromedriver, or `None` (with a message; a failure when `CI` is set).
    pub async fn start(label: &str) -> Option<Driver> {
        Driver::start_sized(label, 1400, 1000).await
    }

    /// The same with a window of `width` × `height` CSS pixels (400 wide: a phone).
    pub async fn start_sized(label: &str, width: u32, height: u32) -> Option<Driver> {
        let (chromium, chromedriver) = ("/usr/bin/chromium", "/usr/bin/chromedriver");
        if !Path::new(chromium).exists() || !Path::new(chromedriver).exists() {
            let message = "SKIPPED: chromium/chromedriver not installed (apt-get install chromium chromium-driver); \
                           the console's browser test did not run";
            assert!(std::env::var_os("CI").is_none(), "{message}, and CI is set");
            eprintln!("{message}");
            println!("{message}");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let process = tower_chat_testkit::ProcessGroup::spawn(
            std::process::Command::new(chromedriver)
                .arg(format!("--port={port}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
        .expect("chromedriver starts");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Ok(answer)) = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::spawn({
                    let url = format!("{base}/status");
                    async move {
                        let client =
                            Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                        client.get(url.parse().unwrap()).await.map(|r| r.status())
                    }
                }),
            )
            .await
            {
                if answer.is_ok() {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "chromedriver did not come up");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut options = json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     format!("--window-size={width},{height}"), format!("--user-data-dir={}", profile.path().display())],
        });
        if width < 600 {
            // A window is never narrower than 500 px: a phone's viewport is emulated.
            options["mobileEmulation"] = json!({
                "deviceMetrics": {"width": width, "height": height, "pixelRatio": 1, "touch": true}
            });
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": options,
        }}});
        let mut driver = Driver {
            _process: process,
            base,
            session: String::new(),
            shots: Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"),
            _profile: profile,
        };
        std::fs::create_dir_all(&driver.shots).unwrap();
        let created = driver.raw("POST", "/session", Some(capabilities)).await;
        driver.session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        driver.shots = driver.shots.join(label);
        std::fs::create_dir_all(&driver.shots).unwrap();
        Some(driver)
    }

    pub async fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let headers = [("content-type", "application/json")];
        let answer = send(method, &format!("{}{path}", self.base), &headers, &body).await;
        serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{e}: {}", answer.body))
    }

    /// A session command; panics on a WebDriver error.
    pub async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.try_cmd(method, path, body).await {
            Ok(value) => value,
            Err(error) => panic!("{method} {path}: {error}"),
        }
    }

    /// A session command on an element, or `None` when the element has gone stale: a live page (the inbox)
    /// replaces its rows whenever the set it lists changes, which another test on a shared database may cause
    /// at any moment. Panics on any other WebDriver error.
    async fn on_element(&self, method: &str, path: &str, body: Option<Value>) -> Option<Value> {
        match self.try_cmd(method, path, body).await {
            Ok(value) => Some(value),
            Err(error) if error["value"]["error"] == "stale element reference" => None,
            Err(error) => panic!("{method} {path}: {error}"),
        }
    }

    async fn try_cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let value = self
            .raw(method, &format!("/session/{}{path}", self.session), body)
            .await;
        if value["value"]["error"].is_null() {
            Ok(value["value"].clone())
        } else {
            Err(value)
        }
    }

    pub async fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    pub async fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn find_all(&self, css: &str) -> Vec<String> {
        let found = self
            .cmd(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[ELEMENT].as_str().unwrap().to_owned())
            .collect()
    }

    /// The first element matching `css`, waiting up to `wait` for it.
    pub async fn find(&self, css: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(first) = self.find_all(css).await.into_iter().next() {
                return first;
            }
            assert!(
                Instant::now() < deadline,
                "no `{css}` within {wait:?} on {}",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The first element matching `css` whose text holds `needle`, waiting up to `wait` for one: a page over a
    /// shared database may also list what other tests (or an earlier, failed run) left there.
    pub async fn find_containing(&self, css: &str, needle: &str, wait: Duration) -> String {
        self.read_containing(css, needle, None, wait).await.element
    }

    /// The same, with the element's text and the value of `attribute` read while it was still on the page (a
    /// live page may replace the element right after): elements replaced while they are read are looked for
    /// again.
    pub async fn read_containing(
        &self,
        css: &str,
        needle: &str,
        attribute: Option<&str>,
        wait: Duration,
    ) -> Read {
        let deadline = Instant::now() + wait;
        loop {
            for element in self.find_all(css).await {
                let Some(text) = self.try_text(&element).await else {
                    continue;
                };
                if !text.contains(needle) {
                    continue;
                }
                let value = match attribute {
                    None => None,
                    Some(name) => match self.try_attribute(&element, name).await {
                        Some(value) => value,
                        None => continue,
                    },
                };
                return Read {
                    element,
                    text,
                    attribute: value,
                };
            }
            assert!(
                Instant::now() < deadline,
                "no `{css}` holding {needle:?} within {wait:?} on {}",
                self.url().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn text(&self, element: &str) -> String {
        self.cmd("GET", &format!("/element/{element}/text"), None)
            .await
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// The element's text, or `None` when it has gone stale.
    async fn try_text(&self, element: &str) -> Option<String> {
        let value = self
            .on_element("GET", &format!("/element/{element}/text"), None)
            .await?;
        Some(value.as_str().unwrap_or("").to_owned())
    }

    /// The text of the first element matching `css`, waiting up to `wait` for one and reading it again when
    /// the page replaced it meanwhile.
    pub async fn text_of(&self, css: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        loop {
            let element = self.find(css, wait).await;
            if let Some(text) = self.try_text(&element).await {
                return text;
            }
            assert!(Instant::now() < deadline, "`{css}` kept being replaced");
        }
    }

    pub async fn attribute(&self, element: &str, name: &str) -> Option<String> {
        self.cmd("GET", &format!("/element/{element}/attribute/{name}"), None)
            .await
            .as_str()
            .map(str::to_owned)
    }

    /// The attribute's value, or `None` (the outer one) when the element has gone stale.
    async fn try_attribute(&self, element: &str, name: &str) -> Option<Option<String>> {
        let value = self
            .on_element("GET", &format!("/element/{element}/attribute/{name}"), None)
            .await?;
        Some(value.as_str().map(str::to_owned))
    }

    /// Type `text` into the first element matching `css`, finding it again when the page replaced it.
    pub async fn type_into_css(&self, css: &str, text: &str, wait: Duration) {
        let body = json!({"text": text});
        self.on_fresh(css, "value", body, wait).await;
    }

    /// Click the first element matching `css`, finding it again when the page replaced it.
    pub async fn click_css(&self, css: &str, wait: Duration) {
        self.on_fresh(css, "click", json!({}), wait).await;
    }

    async fn on_fresh(&self, css: &str, command: &str, body: Value, wait: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let element = self.find(css, wait).await;
            let path = format!("/element/{element}/{command}");
            if self
                .on_element("POST", &path, Some(body.clone()))
                .await
                .is_some()
            {
                return;
            }
            assert!(Instant::now() < deadline, "`{css}` kept being replaced");
        }
    }

    pub async fn type_into(&self, element: &str, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{element}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn click(&self, element: &str) {
        self.cmd(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    pub async fn source(&self) -> String {
        self.cmd("GET", "/source", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    pub async fn screenshot(&self, name: &str) {
        let png = self.cmd("GET", "/screenshot", None).await;
        let bytes = base64_decode(png.as_str().unwrap());
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, bytes).unwrap();
        println!("screenshot: {}", path.display());
    }

    /// No alert opened (an injected `alert(…)` would have).
    pub async fn assert_no_alert(&self) {
        let alert = self
            .raw(
                "GET",
                &format!("/session/{}/alert/text", self.session),
                None,
            )
            .await;
        assert_eq!(alert["value"]["error"], "no such alert", "{alert}");
    }

    /// The browser console's messages (Chromium's log), when chromedriver offers them.
    pub async fn console_log(&self) -> Vec<String> {
        let log = self
            .raw(
                "POST",
                &format!("/session/{}/se/log", self.session),
                Some(json!({"type": "browser"})),
            )
            .await;
        log["value"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| e["message"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Driver {
    /// Run `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Whether the page scrolls sideways: its content wider than the window.
    pub async fn scrolls_sideways(&self) -> bool {
        self.execute(
            "return document.documentElement.scrollWidth > window.innerWidth + 1;",
            vec![],
        )
        .await
        .as_bool()
        .unwrap()
    }

    /// The elements matching `css` whose box ends past the window's right edge (unreachable on a phone
    /// without scrolling sideways), as their text.
    pub async fn off_screen(&self, css: &str) -> Vec<String> {
        let found = self
            .execute(
                "return [...document.querySelectorAll(arguments[0])]
                    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
                    .map(e => e.textContent.trim() || e.outerHTML.slice(0, 80));",
                vec![json!(css)],
            )
            .await;
        serde_json::from_value(found).unwrap()
    }

    /// The page's serious and critical accessibility violations by `axe-core` (`axe_js`: its source), each as
    /// `rule (impact): help — up to five targets`.
    pub async fn axe_violations(&self, axe_js: &str) -> Vec<String> {
        self.execute(&format!("{axe_js}\nreturn true;"), vec![])
            .await;
        let found = self
            .cmd(
                "POST",
                "/execute/async",
                Some(json!({"script": AXE_RUN, "args": []})),
            )
            .await;
        serde_json::from_value(found).unwrap()
    }
}

/// Runs axe on the page and calls back with its serious and critical violations.
const AXE_RUN: &str = "const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 5).map(n => n.target.join(' ')).join(', ')}`)),
  e => done([`axe failed: ${e}`]));";

/// axe-core's source (`npm ci --prefix gateway/tests/axe`; `.ci/run` does it), or `None` with a message (a
/// failure when `CI` is set).
pub fn axe_core() -> Option<String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/axe/node_modules/axe-core/axe.min.js");
    match std::fs::read_to_string(&path) {
        Ok(source) => Some(source),
        Err(e) => {
            let message = format!(
                "SKIPPED: {} ({e}); run `npm ci --prefix gateway/tests/axe`: the accessibility check did not run",
                path.display()
            );
            assert!(std::env::var_os("CI").is_none(), "{message}, and CI is set");
            eprintln!("{message}");
            println!("{message}");
            None
        }
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !b"=\r\n".contains(c)).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(value(*c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}
