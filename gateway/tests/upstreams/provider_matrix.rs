//! Every inbound wire format (Chat Completions, Anthropic Messages, OpenAI Responses) against every upstream
//! kind (`openai`, `openai-responses`, `anthropic`, `azure`, `gemini`, `vertex`, `bedrock`), streamed and not, with the
//! format's official SDK on the client side: the model calls a tool, the client runs it and sends the result
//! back, the model answers with it. Each answer's text and usage must be the upstream's, every model call must
//! leave exactly one record, and every upstream must have been called at its own URL with its own credential.
//!
//! One gateway serves a model per kind; one Python process per inbound format drives all of its cases
//! (`tests/provider_matrix_client.py`). Skips visibly without the `openai` and `anthropic` packages (fails when
//! `CI` is set).

use crate::common;

use serde_json::json;
use tower_chat::ConversationId;
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_persistence::{CallOutcome, Store};

use common::kinds::{
    call_path, carries, check_credential, scripted_usage, streamed, text_reply, weather_call,
    KindUpstreams, KINDS,
};
use common::Harness;

/// The tool result the client sends back; an upstream answers once its request carries it.
const WEATHER: &str = "sunny-21C";
const ANSWER: &str = "In Oslo it is sunny-21C.";
const FORMATS: [&str; 3] = ["chat", "messages", "responses"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_inbound_format_runs_a_tool_conversation_over_every_upstream_kind() {
    const TEST: &str = "every_inbound_format_runs_a_tool_conversation_over_every_upstream_kind";
    if common::python_keys(TEST, "openai").is_none()
        || common::python_keys(TEST, "anthropic").is_none()
    {
        return;
    }
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request, _| {
            if carries(request, WEATHER) {
                text_reply(kind, ANSWER)
            } else {
                weather_call(kind)
            }
        })
    })
    .await;
    let file = ConfigFile::parse(&upstreams.toml(), "gateway.toml").expect("valid config");
    let mut gw = Harness::start(
        |_, _| {
            tower_chat::test_server::Reply::json(500, json!({"error": "the --upstream is unused"}))
        },
        |config| config.file = file,
    )
    .await;

    let cases = json!(upstreams
        .kinds
        .iter()
        .map(|k| json!({"model": k.model(), "usage": scripted_usage(k.kind)}))
        .collect::<Vec<_>>())
    .to_string();
    let run = |format: &'static str| {
        let base_url = match format {
            // The Anthropic SDK adds `/v1` itself.
            "messages" => gw.url(""),
            _ => gw.base_url(),
        };
        let checks: Vec<String> = KINDS
            .iter()
            .flat_map(|kind| {
                [false, true].map(|stream| {
                    format!(
                        "ok {format} m-{kind} stream={}",
                        if stream { "True" } else { "False" }
                    )
                })
            })
            .collect();
        let args = [format.to_owned(), base_url, cases.clone()];
        async move {
            let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
            common::run_python("provider_matrix_client.py", &args, &checks).await;
        }
    };
    tokio::join!(run("chat"), run("messages"), run("responses"));

    // Two model calls per case: 3 formats × 2 shapes × 2 rounds per kind, each at the kind's URL with its
    // credential, streamed or not as the client asked.
    for upstream in &upstreams.kinds {
        let sent = upstream.server.requests();
        assert_eq!(sent.len(), 12, "{}: {sent:#?}", upstream.kind);
        for request in &sent {
            assert_eq!(
                request.path,
                call_path(upstream.kind, streamed(request)),
                "{}",
                upstream.kind
            );
            if let Err(wrong) = check_credential(upstream.kind, request) {
                panic!("{}: {wrong}", upstream.kind);
            }
        }
        let streams = sent.iter().filter(|r| streamed(r)).count();
        assert_eq!(streams, 6, "{}: half the calls stream", upstream.kind);
    }
    assert_eq!(
        upstreams.tokens.requests().len(),
        1,
        "the Vertex token is kept while fresh"
    );

    gw.shutdown();
    gw.server.take().unwrap().await.unwrap().unwrap();
    let store = gw.records().await;
    for format in FORMATS {
        for kind in KINDS {
            for stream in ["False", "True"] {
                let conversation =
                    ConversationId::new(format!("matrix-{format}-m-{kind}-{stream}"));
                let calls = store.conversation_calls(&conversation).await.unwrap();
                let usage: Vec<(u64, u64)> = calls
                    .iter()
                    .map(|c| (c.usage().input_tokens, c.usage().output_tokens))
                    .collect();
                assert_eq!(
                    usage,
                    scripted_usage(kind),
                    "{conversation:?}: one record per model call, with its usage"
                );
                for call in &calls {
                    assert_eq!(call.outcome, CallOutcome::Completed, "{conversation:?}");
                }
            }
        }
    }
}
