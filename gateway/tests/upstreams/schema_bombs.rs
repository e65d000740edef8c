//! Hostile JSON Schemas at the gateway's edge: a `$ref` chain deep enough to exhaust a thread's stack, a DAG of
//! `allOf`/`anyOf` references whose expansion doubles per level, and a "billion laughs" of `$ref`s bound for a
//! Gemini or Vertex target (whose schemas the gateway inlines). Each is a 400 naming the schema limit it breaks,
//! in the caller's wire format, before any upstream is called; and the gateway still answers afterwards.

use crate::common;

use serde_json::{json, Value};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_testkit::{ref_chain, ref_dag, ref_laughs};

use common::kinds::{text_reply, KindUpstreams};
use common::{get, Harness};

/// The three inbound formats, each asking for an answer matching `schema` its own way.
fn answer_requests(model: &str, schema: &Value) -> [(&'static str, Value); 3] {
    let prompt = "Answer in JSON.";
    [
        (
            "/v1/chat/completions",
            json!({"model": model, "messages": [{"role": "user", "content": prompt}],
                "response_format": {"type": "json_schema",
                    "json_schema": {"name": "answer", "schema": schema, "strict": true}}}),
        ),
        (
            "/v1/messages",
            json!({"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": prompt}],
                "output_config": {"format": {"type": "json_schema", "schema": schema}}}),
        ),
        (
            "/v1/responses",
            json!({"model": model, "input": prompt,
                "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema}}}),
        ),
    ]
}

/// A gateway with `[structured]` on, routing `m-<kind>` to a scripted upstream of each kind.
async fn gateway() -> (KindUpstreams, Harness) {
    let upstreams =
        KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, r#"{"x": "y"}"#))).await;
    let toml = format!("{}\n[structured]\nrepairs = 1\n", upstreams.toml());
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let gw = Harness::start(
        |_, _| text_reply("openai", "unused"),
        |config| config.file = file,
    )
    .await;
    (upstreams, gw)
}

/// `body` sent to `path` is a 400 `invalid_request`-style error whose message names `limit`, in the format of
/// the route, and nothing reaches any upstream.
async fn assert_refused(
    gw: &Harness,
    upstreams: &KindUpstreams,
    path: &str,
    body: &Value,
    limit: &str,
) {
    let before: usize = upstreams
        .kinds
        .iter()
        .map(|k| k.server.requests().len())
        .sum();
    let answer = gw.post_json(path, body, &[]).await;
    let model = &body["model"];
    assert_eq!(answer.status, 400, "{path} to {model}: {}", answer.body);
    let error = answer.json();
    // Every format puts its error under `error`, with OpenAI's and Anthropic's common `type`.
    assert_eq!(
        error["error"]["type"], "invalid_request_error",
        "{path}: {error}"
    );
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(limit), "{path}: {message}");
    let after: usize = upstreams
        .kinds
        .iter()
        .map(|k| k.server.requests().len())
        .sum();
    assert_eq!(after, before, "{path}: nothing reaches an upstream");
    assert_eq!(get(&gw.url("/healthz")).await.status, 200, "{path}");
}

#[tokio::test]
async fn an_answer_schema_whose_ref_chain_is_deeper_than_the_limit_is_a_400_naming_max_depth() {
    let (upstreams, gw) = gateway().await;
    let chain = ref_chain(1500, json!({"type": "object"}));
    for (path, body) in answer_requests("m-openai", &chain) {
        assert_refused(&gw, &upstreams, path, &body, "max_depth").await;
    }
    // A chain within the limit still reaches the upstream.
    let short = ref_chain(10, json!({"type": "object"}));
    let (path, body) = &answer_requests("m-openai", &short)[0];
    let answer = gw.post_json(path, body, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

#[tokio::test]
async fn an_answer_schema_whose_references_double_per_level_is_a_400_naming_max_expanded_nodes() {
    let (upstreams, gw) = gateway().await;
    for schema in [
        ref_dag("allOf", 27, 2, json!({"type": "object"})),
        ref_dag("anyOf", 22, 2, json!({"type": "object"})),
    ] {
        for (path, body) in answer_requests("m-anthropic", &schema) {
            assert_refused(&gw, &upstreams, path, &body, "max_expanded_nodes").await;
        }
    }
}

#[tokio::test]
async fn a_ref_billion_laughs_bound_for_gemini_is_a_400_naming_max_expanded_nodes() {
    let (upstreams, gw) = gateway().await;
    for depth in [10, 14] {
        let schema = ref_laughs(depth, 4);
        for model in ["m-gemini", "m-vertex"] {
            let tool = json!({"model": model, "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}]});
            assert_refused(
                &gw,
                &upstreams,
                "/v1/chat/completions",
                &tool,
                "max_expanded_nodes",
            )
            .await;
            for (path, body) in answer_requests(model, &schema) {
                assert_refused(&gw, &upstreams, path, &body, "max_expanded_nodes").await;
            }
        }
    }
    // The same shape two levels deep is an ordinary schema: it reaches Gemini as written (JSON Schema).
    let tool = json!({"model": "m-gemini", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": ref_laughs(2, 4)}}]});
    let answer = gw.post_json("/v1/chat/completions", &tool, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = upstreams.get("gemini").server.requests();
    // The gateway's own tools come first; the client's `f` is among them.
    let declared = sent.last().unwrap().body["tools"][0]["functionDeclarations"]
        .as_array()
        .and_then(|all| all.iter().find(|d| d["name"] == "f"))
        .map(|f| f["parametersJsonSchema"].clone())
        .expect("the client's tool reaches Gemini");
    assert_eq!(declared, ref_laughs(2, 4));
}
