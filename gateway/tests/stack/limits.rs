//! Limits through the gateway: two gateways on one Redis hold one cap under concurrent callers — in one test
//! process (separate listeners, separate Redis clients, `GET /v1/usage` compared) and as two `tower-chat-gateway`
//! processes; 429 with `Retry-After` and an OpenAI-style body; Redis unreachable, fail-closed and fail-open.

use crate::common;

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use common::{post, request, Answer, Harness};
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tower_chat::test_server::{Part, Reply, ScriptedProvider};
use tower_chat_gateway::limits::{LimitsEntry, LimitsSection, PriceEntry, StoreKind};
use tower_chat_testkit::{redis_url, until};

pub(crate) const KEY: &str = "sk-alice";

fn section(url: &str, test: &str, default: LimitsEntry) -> LimitsSection {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut section = LimitsSection {
        store: StoreKind::Redis,
        redis_url: Some(url.to_owned()),
        redis_prefix: Some(format!("tower-chat-gateway-test:{test}:{nanos}:")),
        default,
        ..LimitsSection::default()
    };
    section.prices.insert(
        "test-model".into(),
        PriceEntry {
            input: 1.0,
            output: 2.0,
            ..PriceEntry::default()
        },
    );
    section
}

/// Two gateways sharing `limits`, each with its own scripted upstream answering with `reply`.
async fn two_gateways(limits: &LimitsSection, reply: Reply) -> (tempfile::TempDir, [Harness; 2]) {
    let keys = tempfile::tempdir().unwrap();
    let keys_file = keys.path().join("keys");
    std::fs::write(&keys_file, format!("alice:{KEY}\n")).unwrap();
    let start = || {
        let (limits, keys_file, reply) = (limits.clone(), keys_file.clone(), reply.clone());
        Harness::start(
            move |_req, _i| reply.clone(),
            move |config| {
                config.api_keys_file = Some(keys_file);
                config.file.limits = limits;
            },
        )
    };
    let a = start().await;
    let b = start().await;
    (keys, [a, b])
}

async fn chat(harness: &Harness) -> Answer {
    let body = request(false, "Hello").to_string();
    post(
        &harness.url("/v1/chat/completions"),
        body,
        &[("authorization", &format!("Bearer {KEY}"))],
    )
    .await
}

async fn usage(harness: &Harness) -> Value {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = Request::get(harness.url("/v1/usage"))
        .header("authorization", format!("Bearer {KEY}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

fn counter<'a>(usage: &'a Value, kind: &str) -> &'a Value {
    usage["limits"][0]["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} counter in {usage}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_redis_admit_exactly_the_cap_and_answer_429() {
    let Some(url) = redis_url() else { return };
    let limits = section(
        &url,
        "requests",
        LimitsEntry {
            requests_per_day: Some(20),
            ..LimitsEntry::default()
        },
    );
    let (_keys, gateways) = two_gateways(&limits, Reply::openai_text("Hi there")).await;
    let answers: Vec<Answer> = (0..200)
        .map(|i| chat(&gateways[i % 2]))
        .collect::<FuturesUnordered<_>>()
        .collect()
        .await;
    let ok = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(
        ok,
        20,
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    for refused in answers.iter().filter(|a| a.status != 200) {
        assert_eq!(refused.status, 429, "{}", refused.body);
        let retry_after: u64 = refused.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=86_400).contains(&retry_after), "{retry_after}");
        let body = refused.json();
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    }
    // Only admitted calls reached an upstream.
    let upstream_calls: usize = gateways.iter().map(|g| g.provider.requests().len()).sum();
    assert_eq!(upstream_calls, 20);

    // Either gateway reports the shared counters, and the recorded spend of its own calls.
    let report = usage(&gateways[1]).await;
    assert_eq!(report["caller"], "alice");
    let requests = counter(&report, "requests");
    assert_eq!(
        (requests["used"].as_u64(), requests["remaining"].as_u64()),
        (Some(20), Some(0))
    );
    // Every request a gateway served is recorded in its own store, the refused ones as failed calls without
    // tokens; each answered one used 12 prompt tokens at $1/M and 5 completion tokens at $2/M. Which gateway
    // admitted which of the 20 calls is up to the race, so the two reports are added up.
    let reports = [usage(&gateways[0]).await, report];
    let recorded: Vec<&Value> = reports.iter().map(|r| &r["recorded"]).collect();
    let total = |field: &str| -> u64 { recorded.iter().map(|r| r[field].as_u64().unwrap()).sum() };
    assert_eq!(total("calls"), 200, "{recorded:?}");
    assert_eq!(total("input_tokens"), 20 * 12, "{recorded:?}");
    assert_eq!(total("output_tokens"), 20 * 5, "{recorded:?}");
    for one in &recorded {
        let answered = one["input_tokens"].as_u64().unwrap() / 12;
        let expected = answered as f64 * 22e-6;
        assert!(
            (one["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-12,
            "{one}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_progress_are_capped_across_both_gateways() {
    let Some(url) = redis_url() else { return };
    let limits = section(
        &url,
        "concurrent",
        LimitsEntry {
            concurrent: Some(5),
            cost_per_month_usd: Some(10.0),
            ..LimitsEntry::default()
        },
    );
    // The upstream never finishes: admitted calls stay in progress.
    let hang = Reply::openai_text("").then(Part::Hang);
    let hang = Reply {
        parts: vec![Part::Hang],
        ..hang
    };
    let (_keys, gateways) = two_gateways(&limits, hang).await;
    let mut calls: FuturesUnordered<_> = (0..40).map(|i| chat(&gateways[i % 2])).collect();
    // 35 calls are refused while 5 are in progress (they never end, so they cannot free a slot).
    for _ in 0..35 {
        let answer = calls.next().await.unwrap();
        assert_eq!(answer.status, 429, "{}", answer.body);
        assert_eq!(answer.json()["error"]["type"], "rate_limit_error");
        assert_eq!(
            retry_after(&answer),
            1,
            "a concurrency 429 says when to retry"
        );
    }
    let report = usage(&gateways[0]).await;
    assert_eq!(counter(&report, "concurrent")["used"], 5, "{report}");
    let month = counter(&report, "cost_per_month");
    assert_eq!(month["limit_usd"], 10.0);
    assert!(
        month["used"].as_u64().unwrap() > 0,
        "the in-progress calls' estimates are reserved"
    );
    drop(calls);
}

/// A gateway started as its own process (the `tower-chat-gateway` binary) with the key `alice:KEY`, killed when
/// dropped.
pub(crate) struct GatewayProcess {
    process: crate::common::process::GatewayProcess,
    pub(crate) addr: SocketAddr,
    // After `process`: the files outlive the process that reads them.
    _dir: tempfile::TempDir,
}

impl GatewayProcess {
    /// Start the binary in front of `upstream` with the configuration file `config`, and wait until its
    /// `/healthz` answers.
    pub(crate) async fn start(upstream: &str, config: &str) -> GatewayProcess {
        GatewayProcess::start_with(upstream, config, None).await
    }

    /// [`GatewayProcess::start`], recording calls in PostgreSQL at `database_url` (as replicas do) instead of
    /// a SQLite file of its own.
    pub(crate) async fn start_with(
        upstream: &str,
        config: &str,
        database_url: Option<&str>,
    ) -> GatewayProcess {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("keys"), format!("alice:{KEY}\n")).unwrap();
        std::fs::write(path("gateway.toml"), config).unwrap();
        let mut args: Vec<String> = match database_url {
            Some(url) => vec!["--database-url".into(), url.into()],
            None => vec!["--db".into(), path("gateway.db")],
        };
        args.extend([
            "--upstream".into(),
            upstream.into(),
            "--no-upstream-key".into(),
            "--api-keys-file".into(),
            path("keys"),
            "--config".into(),
            path("gateway.toml"),
        ]);
        let process =
            crate::common::process::GatewayProcess::start(dir.path(), "gateway", &args).await;
        GatewayProcess {
            addr: process.addr,
            process,
            _dir: dir,
        }
    }

    pub(crate) fn log(&self) -> String {
        self.process.log()
    }

    pub(crate) async fn chat(&self) -> Answer {
        post(
            &format!("http://{}/v1/chat/completions", self.addr),
            request(false, "Hello").to_string(),
            &[("authorization", &format!("Bearer {KEY}"))],
        )
        .await
    }
}

/// A `[limits]` table on Redis with a fresh key prefix, and `default` as the body of `[limits.default]`.
fn redis_config(url: &str, test: &str, extra: &str, default: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "[limits]\nstore = \"redis\"\nredis_url = \"{url}\"\n\
         redis_prefix = \"tower-chat-gateway-process-test:{test}:{}:{nanos}:\"\n{extra}\n\
         [limits.default]\n{default}\n\
         [limits.prices.\"test-model\"]\ninput = 1.0\noutput = 2.0\n",
        std::process::id()
    )
}

/// The `Retry-After` of a 429, in whole seconds (present on every one).
fn retry_after(answer: &Answer) -> u64 {
    answer
        .headers
        .get("retry-after")
        .unwrap_or_else(|| panic!("a 429 without Retry-After: {}", answer.body))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_on_one_redis_hold_the_request_cap() {
    let Some(url) = redis_url() else { return };
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hi there")).await;
    let config = redis_config(&url, "requests", "", "requests_per_day = 20");
    let gateways = [
        GatewayProcess::start(&provider.base_url(), &config).await,
        GatewayProcess::start(&provider.base_url(), &config).await,
    ];
    let answers: Vec<Answer> = (0..200)
        .map(|i| gateways[i % 2].chat())
        .collect::<FuturesUnordered<_>>()
        .collect()
        .await;
    // A request reserves exactly one unit, so the cap holds exactly: no overshoot across the processes.
    let ok = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(
        ok,
        20,
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert_eq!(
        provider.requests().len(),
        20,
        "only admitted calls go upstream"
    );
    for refused in answers.iter().filter(|a| a.status != 200) {
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert!((1..=86_400).contains(&retry_after(refused)));
        assert_eq!(refused.json()["error"]["code"], "rate_limit_exceeded");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_processes_share_the_concurrency_cap_and_say_when_to_retry() {
    let Some(url) = redis_url() else { return };
    // The upstream never answers: admitted calls stay in progress and hold their slots.
    let provider = ScriptedProvider::start(|_, _| Reply {
        parts: vec![Part::Hang],
        whole: None,
        ..Reply::openai_text("")
    })
    .await;
    let config = redis_config(
        &url,
        "concurrent",
        "",
        "concurrent = 5\ncost_per_month_usd = 10.0",
    );
    let gateways = [
        GatewayProcess::start(&provider.base_url(), &config).await,
        GatewayProcess::start(&provider.base_url(), &config).await,
    ];
    let mut calls: FuturesUnordered<_> = (0..40).map(|i| gateways[i % 2].chat()).collect();
    for _ in 0..35 {
        let answer = calls.next().await.unwrap();
        assert_eq!(answer.status, 429, "{}", answer.body);
        // No window ends to free a slot: the documented one-second wait.
        assert_eq!(retry_after(&answer), 1, "{:?}", answer.headers);
    }
    // The 5 admitted calls may still be on their way to the upstream when the 35th refusal arrives.
    until("the admitted calls reach the upstream", || {
        std::future::ready(provider.requests().len() >= 5)
    })
    .await;
    assert_eq!(
        provider.requests().len(),
        5,
        "5 slots across both processes"
    );
    drop(calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_process_with_redis_unreachable_fails_closed_or_open_as_configured() {
    let provider = ScriptedProvider::start(|_, _| Reply::openai_text("Hi there")).await;
    // Port 1 on loopback: nothing listens there, so every Redis call fails at once.
    let unreachable = "redis://127.0.0.1:1";
    let closed = GatewayProcess::start(
        &provider.base_url(),
        &redis_config(
            unreachable,
            "closed",
            "on_store_error = \"fail_closed\"",
            "requests_per_day = 1",
        ),
    )
    .await;
    let refused = closed.chat().await;
    assert_eq!(refused.status, 500, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "store_failed");
    assert_eq!(
        provider.requests().len(),
        0,
        "fail-closed sends nothing upstream"
    );

    let open = GatewayProcess::start(
        &provider.base_url(),
        &redis_config(
            unreachable,
            "open",
            "on_store_error = \"fail_open\"",
            "requests_per_day = 1",
        ),
    )
    .await;
    // Over the limit of one a day, yet admitted: nothing can be counted.
    for _ in 0..2 {
        let answer = open.chat().await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(provider.requests().len(), 2);
}
