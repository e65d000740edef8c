//! `[upstreams]` in the config file: models over fallback targets, `GET /v1/models`, and `GET /metrics` scraped
//! and parsed, against scripted providers over loopback HTTP.

use crate::common;

use std::collections::BTreeMap;
use std::future::IntoFuture;

use serde_json::{json, Value};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat_gateway::config_file::ConfigFile;

use common::*;
use tower_chat_testkit::{anthropic_text, status, until};

struct Upstreams {
    dead: ScriptedProvider,
    claude: ScriptedProvider,
    flaky: ScriptedProvider,
    harness: Harness,
}

async fn start() -> Upstreams {
    let dead = ScriptedProvider::start(|_, _| status(503)).await;
    let claude =
        ScriptedProvider::start(|_, _| anthropic_text("claude-sonnet-4-5", "Claude here")).await;
    // Fails its first request, then answers.
    let flaky = ScriptedProvider::start(|_, i| {
        if i == 0 {
            status(500)
        } else {
            Reply::openai_text("second try")
        }
    })
    .await;
    let text = format!(
        r#"
[upstreams.retry]
max_attempts = 3
base_backoff_ms = 1
max_backoff_ms = 2

[upstreams.breaker]
consecutive_failures = 2
open_for_secs = 3600

[[upstreams.models]]
name = "smart"

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o"
base_url = "{dead}"
no_key = true

[[upstreams.models.targets]]
name = "claude"
provider = "anthropic"
model = "claude-sonnet-4-5"
base_url = "{claude}"
no_key = true

[[upstreams.models]]
name = "fast"

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o-mini"
deployments = [{{ base_url = "{flaky}", no_key = true }}]
"#,
        dead = dead.base_url(),
        claude = claude.base_url(),
        flaky = flaky.base_url(),
    );
    let file = ConfigFile::parse(&text, "gateway.toml").expect("valid config");
    let harness = Harness::start(
        |_, _| Reply::openai_text("the --upstream is unused"),
        |config| {
            config.file = file;
        },
    )
    .await;
    Upstreams {
        dead,
        claude,
        flaky,
        harness,
    }
}

fn chat(model: &str, stream: bool) -> Value {
    let mut body = request(stream, "hello");
    body["model"] = json!(model);
    body
}

#[tokio::test]
async fn configured_models_are_listed_routed_and_fall_back() {
    let up = start().await;
    let models = get(&up.harness.url("/v1/models")).await;
    assert_eq!(models.status, 200);
    let models = models.json();
    assert_eq!(models["object"], "list");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["smart", "fast"]);
    assert_eq!(
        models["data"][0]["targets"],
        json!(["openai/gpt-4o", "claude"])
    );

    for stream in [false, true, false] {
        let answer = up.harness.chat(&chat("smart", stream)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let text = answer.chat_text(stream);
        assert_eq!(text, "Claude here");
    }
    // The dead primary was called until its breaker opened (2 failures), then skipped.
    assert_eq!(up.dead.requests().len(), 2);
    assert_eq!(up.claude.requests().len(), 3);
    assert_eq!(up.claude.requests()[0].body["model"], "claude-sonnet-4-5");

    // "fast": 500 then retried.
    let answer = up.harness.chat(&chat("fast", false)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(up.flaky.requests().len(), 2);

    let unknown = up.harness.chat(&chat("gpt-5", false)).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(unknown.body.contains("not configured"), "{}", unknown.body);
    assert!(unknown.body.contains("smart, fast"), "{}", unknown.body);
}

/// One parsed sample: metric name, labels, value.
type Samples = BTreeMap<(String, BTreeMap<String, String>), f64>;

/// A strict-enough parser of the OpenMetrics text format: every sample line is `name{labels} value`, every
/// metric family has a `# TYPE` line before its samples (a counter's samples end in `_total`), and the
/// exposition ends with `# EOF`.
fn parse(text: &str) -> Samples {
    let mut typed = std::collections::HashSet::new();
    let mut samples = Samples::new();
    assert!(text.ends_with("# EOF\n"), "no `# EOF` at the end");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap();
            let kind = parts.next().unwrap();
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            typed.insert(name.to_owned());
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.strip_suffix('}').expect(line)),
            None => (series, ""),
        };
        let base = ["_bucket", "_sum", "_count", "_total"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| typed.contains(*b)))
            .unwrap_or(name);
        assert!(typed.contains(base), "no TYPE before {line}");
        let mut map = BTreeMap::new();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').expect(line);
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .expect(line);
            map.insert(k.to_owned(), v.to_owned());
        }
        assert!(
            samples.insert((name.to_owned(), map), value).is_none(),
            "duplicate {line}"
        );
    }
    samples
}

fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples.get(&(name.to_owned(), want)).copied()
}

#[tokio::test]
async fn metrics_are_scraped_and_parsed() {
    let up = start().await;
    for stream in [true, false, true] {
        let answer = up.harness.chat(&chat("smart", stream)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(up.harness.chat(&chat("fast", true)).await.status, 200);
    assert_eq!(up.harness.chat(&chat("nope", false)).await.status, 404);

    let scrape = get(&up.harness.url("/metrics")).await;
    assert_eq!(scrape.status, 200);
    assert!(scrape.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text; version=1.0.0"));
    let samples = parse(&scrape.body);
    let smart = [("provider", "openai"), ("model", "smart")];
    let with = |extra: (&'static str, &'static str)| {
        let mut l = smart.to_vec();
        l.push(extra);
        l
    };
    assert_eq!(
        value(
            &samples,
            "tower_chat_requests_total",
            &with(("outcome", "completed"))
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "tower_chat_errors_total",
            &[
                ("provider", "openai"),
                ("model", "other"),
                ("error_type", "invalid_request")
            ]
        ),
        Some(1.0)
    );
    // Histograms: cumulative buckets, +Inf equal to the count.
    assert_eq!(
        value(
            &samples,
            "tower_chat_request_duration_seconds_count",
            &smart
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "tower_chat_request_duration_seconds_bucket",
            &with(("le", "+Inf"))
        ),
        Some(3.0)
    );
    let mut last = 0.0;
    for le in ["0.005", "0.01", "0.1", "1.0", "10.0", "120.0", "+Inf"] {
        let n = value(
            &samples,
            "tower_chat_request_duration_seconds_bucket",
            &with(("le", le)),
        )
        .unwrap();
        assert!(n >= last, "bucket {le}");
        last = n;
    }
    // The upstream is asked to stream when the client is: the two streamed calls have a time to first chunk,
    // the non-streamed one (one JSON answer upstream too) has none.
    assert_eq!(
        value(
            &samples,
            "tower_chat_time_to_first_chunk_seconds_count",
            &smart
        ),
        Some(2.0)
    );
    assert!(
        value(
            &samples,
            "tower_chat_tokens_total",
            &with(("type", "input"))
        )
        .unwrap()
            >= 30.0
    );
    assert!(
        value(
            &samples,
            "tower_chat_tokens_total",
            &with(("type", "output"))
        )
        .unwrap()
            > 0.0
    );
    // Resilience: every smart call fell back; fast retried once; the primary's breaker opened once.
    assert_eq!(
        value(
            &samples,
            "tower_chat_fallbacks_total",
            &[
                ("model", "smart"),
                ("from", "openai/gpt-4o"),
                ("to", "claude")
            ]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "tower_chat_retries_total", &[("model", "fast")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &samples,
            "tower_chat_breaker_transitions_total",
            &[
                ("model", "smart"),
                ("target", "openai/gpt-4o"),
                ("state", "open")
            ]
        ),
        Some(1.0)
    );
    for (state, expected) in [("open", 1.0), ("closed", 0.0), ("half_open", 0.0)] {
        assert_eq!(
            value(
                &samples,
                "tower_chat_breaker_state",
                &[
                    ("model", "smart"),
                    ("target", "openai/gpt-4o"),
                    ("state", state)
                ]
            ),
            Some(expected),
            "{state}"
        );
    }
    assert_eq!(
        value(
            &samples,
            "tower_chat_breaker_state",
            &[
                ("model", "smart"),
                ("target", "claude"),
                ("state", "closed")
            ]
        ),
        Some(1.0)
    );
    for target in ["claude", "openai/gpt-4o", "openai/gpt-4o-mini#1"] {
        assert_eq!(
            value(
                &samples,
                "tower_chat_upstream_stale_connections_total",
                &[("target", target)]
            ),
            Some(0.0),
            "{target}"
        );
    }
}

#[tokio::test]
async fn the_single_upstream_flags_keep_working_and_feed_metrics() {
    let harness = Harness::start(|_, _| Reply::openai_text("single"), |_| {}).await;
    let answer = harness.chat(&request(false, "hi")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let models = get(&harness.url("/v1/models")).await.json();
    assert_eq!(models["data"], json!([]));
    let samples = parse(&get(&harness.url("/metrics")).await.body);
    assert_eq!(
        value(
            &samples,
            "tower_chat_requests_total",
            &[
                ("provider", "openai"),
                ("model", "test-model"),
                ("outcome", "completed")
            ]
        ),
        Some(1.0)
    );
    // The leaf's stale-connection count is scraped (none here: the upstream keeps its connections).
    assert_eq!(
        value(
            &samples,
            "tower_chat_upstream_stale_connections_total",
            &[("target", "upstream")]
        ),
        Some(0.0)
    );
}

/// Calls asking for model names no operator chose: huge ones, many distinct ones.
async fn ask_for_many_models(harness: &Harness) {
    for i in 0..3 {
        let huge = format!("{i}{}", "m".repeat(300_000));
        let answer = harness.chat(&chat(&huge, false)).await;
        assert!(answer.status.is_client_error() || answer.status == 200);
    }
    for i in 0..300 {
        harness.chat(&chat(&format!("model-{i}"), false)).await;
    }
}

#[tokio::test]
async fn with_upstreams_only_configured_model_names_are_label_values() {
    let up = start().await;
    assert_eq!(up.harness.chat(&chat("fast", false)).await.status, 200);
    ask_for_many_models(&up.harness).await;
    let scrape = get(&up.harness.url("/metrics")).await.body;
    let models: std::collections::BTreeSet<String> = parse(&scrape)
        .keys()
        .filter_map(|(_, labels)| labels.get("model").cloned())
        .collect();
    assert_eq!(
        models.into_iter().collect::<Vec<_>>(),
        ["fast", "other", "smart"],
        "{scrape}"
    );
}

#[tokio::test]
async fn without_upstreams_model_labels_are_short_and_capped() {
    let harness = Harness::start(|_, _| Reply::openai_text("single"), |_| {}).await;
    ask_for_many_models(&harness).await;
    let scrape = get(&harness.url("/metrics")).await.body;
    let models: std::collections::BTreeSet<String> = parse(&scrape)
        .keys()
        .filter_map(|(_, labels)| labels.get("model").cloned())
        .collect();
    assert!(models.contains("other") && models.contains("model-0"));
    assert_eq!(models.len(), tower_chat_gateway::metrics::MAX_SERIES);
    assert!(models
        .iter()
        .all(|m| m.len() <= tower_chat_gateway::metrics::MAX_LABEL_BYTES));
    // 256 short names: the scrape stays far below what the names sent add up to (900 KB).
    assert!(scrape.len() < 1 << 20, "{} bytes", scrape.len());
}

#[tokio::test]
async fn metrics_can_require_a_key() {
    const VAR: &str = "TOWER_CHAT_GATEWAY_TEST_METRICS_KEY";
    std::env::set_var(VAR, "scrape-secret");
    let harness = Harness::start(
        |_, _| Reply::openai_text("single"),
        |config| config.metrics_key_env = Some(VAR.into()),
    )
    .await;
    let url = harness.url("/metrics");
    let missing = send("GET", &url, &[], "").await;
    assert_eq!(missing.status, 401, "{}", missing.body);
    assert_eq!(missing.headers["www-authenticate"], "Bearer");
    let wrong = send(
        "GET",
        &url,
        &[("authorization", "Bearer scrape-secreT")],
        "",
    )
    .await;
    assert_eq!(wrong.status, 401);
    let right = send(
        "GET",
        &url,
        &[("authorization", "Bearer scrape-secret")],
        "",
    )
    .await;
    assert_eq!(right.status, 200);
    assert!(right.body.ends_with("# EOF\n"), "{}", right.body);

    // A key variable that holds nothing: the gateway does not start (its metrics would be open).
    let mut config = tower_chat_gateway::Config::new("http://127.0.0.1:9/v1");
    config.no_upstream_key = true;
    config.metrics_key_env = Some("TOWER_CHAT_GATEWAY_TEST_METRICS_KEY_UNSET".into());
    config.db = harness.files.path().join("unused.db");
    let error = tower_chat_gateway::Gateway::new(&config)
        .await
        .expect_err("an unset metrics key variable is refused");
    assert!(
        error
            .to_string()
            .contains("TOWER_CHAT_GATEWAY_TEST_METRICS_KEY_UNSET"),
        "{error}"
    );
}

#[tokio::test]
async fn metrics_can_be_served_on_another_address() {
    let harness = Harness::start(
        |_, _| Reply::openai_text("single"),
        |config| config.metrics_listen = Some(([127, 0, 0, 1], 0).into()),
    )
    .await;
    assert_eq!(harness.chat(&request(false, "hi")).await.status, 200);
    assert_eq!(get(&harness.url("/metrics")).await.status, 404);

    let mut config = tower_chat_gateway::Config::new(harness.provider.base_url());
    config.metrics_listen = Some(([127, 0, 0, 1], 0).into());
    config.db = harness.files.path().join("second.db");
    config.no_upstream_key = true;
    let gateway = tower_chat_gateway::Gateway::new(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, gateway.metrics_router()).into_future());
    let scrape = get(&format!("http://{addr}/metrics")).await;
    assert_eq!(scrape.status, 200);
    assert!(scrape.body.ends_with("# EOF\n"), "{}", scrape.body);
}

/// `[upstreams]` with one model per name, every one on `base_url`.
fn models_file(names: &[&str], base_url: &str) -> String {
    names
        .iter()
        .map(|name| {
            format!(
                r#"
[[upstreams.models]]
name = "{name}"

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o-mini"
base_url = "{base_url}"
no_key = true
"#
            )
        })
        .collect()
}

/// A gateway started with `--config <dir>/gateway.toml` holding `text`.
async fn with_config_file(dir: &std::path::Path, text: &str) -> (Harness, std::path::PathBuf) {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    let file = ConfigFile::load(&path).expect("valid config");
    let for_config = path.clone();
    let harness = Harness::start(
        |_, _| Reply::openai_text("the --upstream is unused"),
        move |config| {
            config.file = file;
            config.config_path = Some(for_config);
        },
    )
    .await;
    (harness, path)
}

async fn model_ids(harness: &Harness) -> Vec<String> {
    let models = get(&harness.url("/v1/models")).await.json();
    models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

fn content(answer: &Answer) -> String {
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_reload_swaps_the_models_and_keeps_requests_in_flight_on_the_old_ones() {
    // The old upstream answers after a while, so a request is still in flight when the file changes.
    let old = ScriptedProvider::start(|_, _| {
        Reply::openai_text("old config").delayed(std::time::Duration::from_millis(300))
    })
    .await;
    let new = ScriptedProvider::start(|_, _| Reply::openai_text("new config")).await;
    let dir = tempfile::tempdir().unwrap();
    let (harness, path) =
        with_config_file(dir.path(), &models_file(&["chat"], &old.base_url())).await;
    let reloader = harness
        .reloader
        .clone()
        .expect("[upstreams] gives a reloader");
    assert_eq!(model_ids(&harness).await, ["chat"]);

    let url = harness.url("/v1/chat/completions");
    let body = serde_json::to_vec(&chat("chat", false)).unwrap();
    let in_flight = tokio::spawn(async move { post(&url, body, &[]).await });
    until("the old upstream has the request", || {
        std::future::ready(old.requests().len() == 1)
    })
    .await;

    std::fs::write(&path, models_file(&["chat", "extra"], &new.base_url())).unwrap();
    reloader.reload().expect("a valid file is swapped in");

    // The request that started before the reload finishes on the old upstream; new ones go to the new one.
    assert_eq!(content(&in_flight.await.unwrap()), "old config");
    assert_eq!(
        content(&harness.chat(&chat("chat", false)).await),
        "new config"
    );
    assert_eq!(
        content(&harness.chat(&chat("extra", false)).await),
        "new config"
    );
    assert_eq!(old.requests().len(), 1);
    assert_eq!(new.requests().len(), 2);
    assert_eq!(model_ids(&harness).await, ["chat", "extra"]);

    // A file that does not parse is refused with its line; the running models stay.
    std::fs::write(&path, "[[upstreams.models]]\nname = 7\n").unwrap();
    let error = reloader.reload().unwrap_err().to_string();
    assert!(
        error.contains("gateway.toml") && error.contains("line 2"),
        "{error}"
    );
    // So is one that parses but builds nothing usable.
    std::fs::write(&path, "").unwrap();
    let error = reloader.reload().unwrap_err().to_string();
    assert!(error.contains("names no model"), "{error}");
    std::fs::write(
        &path,
        models_file(&["chat"], &new.base_url()) + "[upstreams.retry]\nmax_attempts = 0\n",
    )
    .unwrap();
    assert!(reloader.reload().is_err(), "max_attempts = 0 is refused");
    assert_eq!(model_ids(&harness).await, ["chat", "extra"]);
    assert_eq!(
        content(&harness.chat(&chat("extra", false)).await),
        "new config"
    );
}

/// Sends SIGHUP to this process (the test binary), then waits (at most 5 s) until `/v1/models` lists `ids`.
#[cfg(unix)]
async fn hang_up_until(harness: &Harness, ids: &[&str]) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    until(
        "the reload",
        || async move { model_ids(harness).await == ids },
    )
    .await;
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_the_config_file() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("hi")).await;
    let dir = tempfile::tempdir().unwrap();
    let (harness, path) =
        with_config_file(dir.path(), &models_file(&["before"], &provider.base_url())).await;
    let reloader = harness.reloader.clone().unwrap();
    // The listener is installed before this returns: the SIGHUPs below cannot terminate the test binary.
    tokio::spawn(tower_chat_gateway::reload_on_sighup(reloader).expect("SIGHUP listener"));

    std::fs::write(&path, models_file(&["after"], &provider.base_url())).unwrap();
    hang_up_until(&harness, &["after"]).await;
    assert_eq!(content(&harness.chat(&chat("after", false)).await), "hi");

    // An invalid file is refused (asserted in-process above) and the listener goes on: the next valid file
    // still takes effect.
    std::fs::write(&path, "[upstreams\n").unwrap();
    hang_up_until(&harness, &["after"]).await;
    std::fs::write(&path, models_file(&["third"], &provider.base_url())).unwrap();
    hang_up_until(&harness, &["third"]).await;
}

/// An upstream key variable that cannot work (unset, empty, not a name, a key with CR/LF) refuses the start, in
/// process and as the program, naming the upstream and the variable and never the key; the explicit opt-out
/// starts without one.
#[tokio::test]
async fn an_upstream_key_that_cannot_work_refuses_the_start_naming_upstream_and_variable() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("never called")).await;
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("TOWER_CHAT_KEYS_TEST_EMPTY", "");
    std::env::set_var("TOWER_CHAT_KEYS_TEST_CRLF", "sk-secret\r\nX-Injected: 1");
    for variable in [
        "TOWER_CHAT_KEYS_TEST_UNSET",
        "TOWER_CHAT_KEYS_TEST_EMPTY",
        "TOWER_CHAT_KEYS_TEST_CRLF",
        "NOT-A-NAME",
        "",
    ] {
        let mut config = tower_chat_gateway::Config::new(provider.base_url());
        config.db = dir.path().join("gateway.db");
        config.upstream_key_env = Some(variable.into());
        let error = tower_chat_gateway::Gateway::new(&config)
            .await
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&provider.base_url()),
            "{variable:?}: {error}"
        );
        assert!(
            error.contains(&format!("`{variable}`")),
            "{variable:?}: {error}"
        );
        assert!(!error.contains("sk-secret"), "{error}");
    }
    // An `[upstreams]` target names its own.
    let text = format!(
        "[[upstreams.models]]\nname = \"smart\"\n\n[[upstreams.models.targets]]\nprovider = \"anthropic\"\n\
         model = \"claude\"\nbase_url = \"{}\"\nkey_env = \"TOWER_CHAT_KEYS_TEST_CRLF\"\n",
        provider.base_url()
    );
    let mut config = tower_chat_gateway::Config::new(provider.base_url());
    config.db = dir.path().join("gateway.db");
    config.no_upstream_key = true;
    config.file = ConfigFile::parse(&text, "gateway.toml").unwrap();
    let error = tower_chat_gateway::Gateway::new(&config)
        .await
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(error.contains("`anthropic/claude`"), "{error}");
    assert!(error.contains("TOWER_CHAT_KEYS_TEST_CRLF"), "{error}");
    assert!(provider.requests().is_empty());

    // The program exits at once with the reason, before it listens.
    let output = tokio::task::spawn_blocking({
        let (db, upstream) = (dir.path().join("process.db"), provider.base_url());
        move || {
            tower_chat_testkit::ProcessGroup::output(
                std::process::Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
                    .args(["--listen", "127.0.0.1:0", "--upstream", &upstream])
                    .args(["--upstream-key-env", "TOWER_CHAT_KEYS_TEST_CRLF", "--db"])
                    .arg(db)
                    .env("TOWER_CHAT_KEYS_TEST_CRLF", "sk-secret\r\n")
                    .env("RUST_LOG", "info"),
            )
            .unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&provider.base_url()), "{stderr}");
    assert!(stderr.contains("TOWER_CHAT_KEYS_TEST_CRLF"), "{stderr}");
    assert!(!stderr.contains("sk-secret"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("gateway listening"));
}

/// The start-up line names the configured `[upstreams]` models and targets (and where their keys come from), not
/// the default `--upstream` they replace.
#[tokio::test]
async fn the_start_up_line_names_the_configured_upstreams() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        "[[upstreams.models]]\nname = \"smart\"\n\n[[upstreams.models.targets]]\nprovider = \"openai\"\n\
         model = \"gpt-4o\"\nbase_url = \"http://127.0.0.1:9/v1\"\nno_key = true\n",
    )
    .unwrap();
    let db = dir.path().join("gateway.db");
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut child = tower_chat_testkit::ProcessGroup::spawn(
            std::process::Command::new(env!("CARGO_BIN_EXE_tower-chat-gateway"))
                .args(["--listen", "127.0.0.1:0", "--config"])
                .arg(&path)
                .arg("--db")
                .arg(&db)
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::inherit()),
        )
        .unwrap();
        // Read until the line is logged (or the program ends: the line is then missing).
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .map_while(Result::ok)
            .find(|line| line.contains("gateway listening"));
        let _ = child.kill();
        let _ = child.wait();
        line
    })
    .await
    .unwrap()
    .expect("the gateway logs its start-up line");
    assert!(
        line.contains("smart: openai/gpt-4o http://127.0.0.1:9/v1 (no key)"),
        "{line}"
    );
    assert!(!line.contains("api.openai.com"), "{line}");
}
