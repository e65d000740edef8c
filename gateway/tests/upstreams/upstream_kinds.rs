//! `[upstreams]` targets of every kind: `/v1/models` names each model's providers; a model whose first target
//! fails with a retryable error falls back to a target of another kind (OpenAI to Azure, OpenAI to Gemini);
//! Gemini's recitation and malformed-call finishes reach each inbound format in the words its clients know,
//! with the real reason in the `tower_chat` field.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{carries, text_reply, KindUpstreams, KEY_ENV};
use common::{get, Harness};

async fn gateway(toml: &str) -> Harness {
    let file = ConfigFile::parse(toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await
}

#[tokio::test]
async fn the_model_list_names_every_model_with_its_providers() {
    let upstreams = KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "hi"))).await;
    let gw = gateway(&upstreams.toml()).await;
    let models = get(&gw.url("/v1/models")).await.json();
    let listed: Vec<(String, String, String, Value)> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_owned(),
                m["provider"].as_str().unwrap().to_owned(),
                m["owned_by"].as_str().unwrap().to_owned(),
                m["providers"].clone(),
            )
        })
        .collect();
    let expected: Vec<(String, String, String, Value)> = [
        ("openai", "openai"),
        ("openai-responses", "openai"),
        ("anthropic", "anthropic"),
        ("azure", "azure"),
        ("gemini", "gemini"),
        ("vertex", "vertex_ai"),
        ("bedrock", "bedrock"),
    ]
    .iter()
    .map(|(kind, owner)| {
        (
            format!("m-{kind}"),
            kind.to_string(),
            owner.to_string(),
            json!([kind]),
        )
    })
    .collect();
    assert_eq!(listed, expected);
}

/// A model served first by OpenAI, then by `second` (a target of another kind).
fn fallback_toml(first: &ScriptedProvider, second: &str, upstreams: &KindUpstreams) -> String {
    format!(
        "[upstreams.retry]\nmax_attempts = 1\n\n[[upstreams.models]]\nname = \"smart\"\n\n\
         [[upstreams.models.targets]]\nprovider = \"openai\"\nmodel = \"gpt-4o\"\nbase_url = \"{}\"\n\
         key_env = \"{KEY_ENV}\"\n\n{}",
        first.base_url(),
        upstreams.target(second).replace("[[upstreams.models.targets]]", "[[upstreams.models.targets]]\nname = \"second\""),
    )
}

#[tokio::test]
async fn a_retryable_failure_falls_back_to_a_target_of_another_kind() {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |_, _| text_reply(kind, &format!("answered by {kind}")))
    })
    .await;
    for (failure, second) in [
        (503, "azure"),
        (429, "gemini"),
        (500, "vertex"),
        (529, "anthropic"),
        (502, "bedrock"),
    ] {
        let first = ScriptedProvider::start(move |_, _| {
            Reply::json(failure, json!({"error": {"message": "scripted failure"}}))
        })
        .await;
        let gw = gateway(&fallback_toml(&first, second, &upstreams)).await;
        let before = upstreams.get(second).server.requests().len();
        for stream in [false, true] {
            let mut body = common::request(stream, "hello");
            body["model"] = json!("smart");
            let answer = gw.chat(&body).await;
            assert_eq!(
                answer.status, 200,
                "{failure} then {second}: {}",
                answer.body
            );
            let text = answer.chat_text(stream);
            assert_eq!(
                text,
                format!("answered by {second}"),
                "{failure} stream={stream}"
            );
        }
        assert_eq!(
            first.requests().len(),
            2,
            "{failure}: the first target was tried"
        );
        assert_eq!(
            upstreams.get(second).server.requests().len() - before,
            2,
            "{second} answered both"
        );
    }
}

#[tokio::test]
async fn a_failure_that_is_not_retryable_does_not_fall_back() {
    let upstreams =
        KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "never"))).await;
    let first = ScriptedProvider::start(|_, _| {
        Reply::json(400, json!({"error": {"message": "scripted bad request"}}))
    })
    .await;
    let gw = gateway(&fallback_toml(&first, "gemini", &upstreams)).await;
    let mut body = common::request(false, "hello");
    body["model"] = json!("smart");
    let answer = gw.chat(&body).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(upstreams.get("gemini").server.requests().is_empty());
}

/// A Gemini answer cut by `reason` after `text`.
fn gemini_finish(reason: &str, text: &str) -> Reply {
    let parts = if text.is_empty() {
        json!([])
    } else {
        json!([{"text": text}])
    };
    Reply::gemini_stream(&[json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason, "index": 0}],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10},
    })])
}

#[tokio::test]
async fn gemini_recitation_and_malformed_call_finishes_reach_every_inbound_format() {
    let upstreams = KindUpstreams::start(|_| {
        Box::new(|request, _| {
            if carries(request, "recite") {
                gemini_finish("RECITATION", "Once upon a")
            } else {
                gemini_finish("MALFORMED_FUNCTION_CALL", "")
            }
        })
    })
    .await;
    let gw = gateway(&upstreams.toml()).await;
    let cases = [
        // (prompt, the real reason, Chat Completions' finish_reason, Messages' stop_reason, Responses' status
        // and incomplete reason)
        (
            "recite",
            "recitation",
            "content_filter",
            "refusal",
            "incomplete",
            json!({"reason": "content_filter"}),
        ),
        (
            "call",
            "malformed_function_call",
            "stop",
            "end_turn",
            "completed",
            Value::Null,
        ),
    ];
    for (prompt, reason, chat_reason, stop_reason, status, incomplete) in cases {
        for stream in [false, true] {
            let what = format!("{prompt} stream={stream}");
            let chat = gw
                .post_json(
                    "/v1/chat/completions",
                    &json!({"model": "m-gemini", "stream": stream,
                        "messages": [{"role": "user", "content": prompt}]}),
                    &[],
                )
                .await;
            assert_eq!(chat.status, 200, "{what}: {}", chat.body);
            let last = if stream {
                chat.chunks().into_iter().last().unwrap()
            } else {
                chat.json()
            };
            assert_eq!(
                last["choices"][0]["finish_reason"], chat_reason,
                "{what}: {last}"
            );
            assert_eq!(
                last["tower_chat"]["finish_reason"], reason,
                "{what}: {last}"
            );

            let messages = gw
                .post_json(
                    "/v1/messages",
                    &json!({"model": "m-gemini", "max_tokens": 64, "stream": stream,
                        "messages": [{"role": "user", "content": prompt}]}),
                    &[],
                )
                .await;
            assert_eq!(messages.status, 200, "{what}: {}", messages.body);
            let (said, field) = if stream {
                let events = messages.named_events();
                let (_, delta) = events
                    .iter()
                    .find(|(name, _)| name == "message_delta")
                    .unwrap();
                (
                    delta["delta"]["stop_reason"].clone(),
                    delta["tower_chat"].clone(),
                )
            } else {
                let body = messages.json();
                (body["stop_reason"].clone(), body["tower_chat"].clone())
            };
            assert_eq!(said, stop_reason, "{what}");
            assert_eq!(field["finish_reason"], reason, "{what}");

            let responses = gw
                .post_json(
                    "/v1/responses",
                    &json!({"model": "m-gemini", "stream": stream, "input": prompt}),
                    &[],
                )
                .await;
            assert_eq!(responses.status, 200, "{what}: {}", responses.body);
            let response = if stream {
                let events = responses.named_events();
                let (name, last) = events.last().unwrap().clone();
                assert_eq!(name, format!("response.{status}"), "{what}");
                last["response"].clone()
            } else {
                responses.json()
            };
            assert_eq!(response["status"], status, "{what}: {response}");
            assert_eq!(
                response["incomplete_details"], incomplete,
                "{what}: {response}"
            );
            assert_eq!(
                response["tower_chat"]["finish_reason"], reason,
                "{what}: {response}"
            );
        }
    }
}

/// Claude Code's tools (Messages format) as it sends them, from the core's fixture.
fn claude_code_tools() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/claude_code_tools.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn claude_code_tools_reach_gemini_as_json_schema_or_lowered_to_the_openapi_subset() {
    let upstreams =
        KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "Read it"))).await;
    // The same Gemini server behind a second model whose target takes only the OpenAPI subset.
    let toml = format!(
        "{}[[upstreams.models]]\nname = \"m-gemini-openapi\"\n\n{}schema_form = \"openapi\"\n",
        upstreams.toml(),
        upstreams.target("gemini")
    );
    let gw = gateway(&toml).await;
    let tools = claude_code_tools();
    for model in ["m-gemini", "m-gemini-openapi"] {
        let body = json!({"model": model, "max_tokens": 1024, "tools": tools,
            "messages": [{"role": "user", "content": "Read a.txt"}]});
        let answer = gw.post_json("/v1/messages", &body, &[]).await;
        assert_eq!(answer.status, 200, "{model}: {}", answer.body);
        assert_eq!(answer.json()["content"][0]["text"], "Read it", "{model}");
        let sent = upstreams.get("gemini").server.requests();
        let declared = sent.last().unwrap().body["tools"][0]["functionDeclarations"]
            .as_array()
            .and_then(|all| all.iter().find(|d| d["name"] == "Read").cloned())
            .expect("Read reaches Gemini");
        let limit = if model == "m-gemini" {
            assert!(declared["parametersJsonSchema"].get("$schema").is_none());
            &declared["parametersJsonSchema"]["properties"]["limit"]
        } else {
            &declared["parameters"]["properties"]["limit"]
        };
        let expected = if model == "m-gemini" {
            json!({"type": "integer", "exclusiveMinimum": 0, "description": "The number of lines to read"})
        } else {
            json!({"type": "integer", "minimum": 1, "description": "The number of lines to read"})
        };
        assert_eq!(limit, &expected, "{model}: {declared}");
    }
}

#[tokio::test]
async fn a_request_without_max_tokens_reaches_claude_with_the_models_own_output_maximum() {
    let upstreams = KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "hi"))).await;
    let gw = gateway(&upstreams.toml()).await;
    for model in ["m-anthropic", "m-bedrock"] {
        // The Responses API has no required output limit: the caller gave none.
        let body = json!({"model": model, "input": "hi"});
        let answer = gw.post_json("/v1/responses", &body, &[]).await;
        assert_eq!(answer.status, 200, "{model}: {}", answer.body);
    }
    let anthropic = upstreams.get("anthropic").server.requests();
    // claude-sonnet-4-5: 64,000 (Anthropic's models overview).
    assert_eq!(anthropic[0].body["max_tokens"], 64_000);
    let bedrock = upstreams.get("bedrock").server.requests();
    // anthropic.claude-3-haiku-20240307-v1:0: 4,096.
    assert_eq!(bedrock[0].body["inferenceConfig"]["maxTokens"], 4_096);
}

/// `--provider` with `--upstream` is read as a target of that kind and built by the same code as an
/// `[upstreams]` target: a kind the file can name and the command line needs no other setting for is served
/// from the command line alone, with the client's model passed through.
#[tokio::test]
async fn the_single_upstream_reaches_each_kind_the_command_line_can_name() {
    use tower_chat_gateway::Provider;
    for (provider, kind, model, path) in [
        (
            Provider::Gemini,
            "gemini",
            "gemini-2.5-flash",
            "/v1/models/gemini-2.5-flash:generateContent",
        ),
        (
            Provider::OpenAiResponses,
            "openai-responses",
            "gpt-5-mini",
            "/v1/responses",
        ),
        (
            Provider::Anthropic,
            "anthropic",
            "claude-sonnet-4-5",
            "/v1/messages",
        ),
    ] {
        let gw = Harness::start(
            move |_, _| common::kinds::text_reply(kind, "from the command line"),
            |config| config.provider = provider,
        )
        .await;
        let answer = gw
            .chat(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
            .await;
        assert_eq!(answer.status, 200, "{kind}: {}", answer.body);
        assert_eq!(answer.chat_text(false), "from the command line", "{kind}");
        let requests = gw.provider.requests();
        assert_eq!(requests[0].path, path, "{kind}");
    }
}

/// A kind whose host and credential come from settings the command line has no flag for is refused at
/// start, naming what it needs, instead of starting a gateway that cannot call it.
#[tokio::test]
async fn a_single_upstream_of_a_kind_that_needs_more_settings_is_refused_at_start() {
    for (args, needle) in [
        (&["--provider", "vertex"][..], "`project` and `location`"),
        (&["--provider", "bedrock"][..], "`region`"),
        (&["--provider", "azure"][..], "resource's endpoint"),
        (
            &["--provider", "gemini", "--upstream", "ftp://x"][..],
            "not an http(s) URL",
        ),
    ] {
        let error = match tower_chat_gateway::Config::parse(args.iter().copied()) {
            Err(error) => error,
            Ok(_) => panic!("{args:?} was accepted"),
        };
        assert!(
            matches!(&error, tower_chat_gateway::CliError::Upstream(_)),
            "{args:?}: {error:?}"
        );
        assert!(error.to_string().contains(needle), "{args:?}: {error}");
    }
}
