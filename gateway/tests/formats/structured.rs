//! Structured output through the gateway: each inbound format's JSON-answer field (Chat Completions
//! `response_format`, Anthropic Messages `output_config.format` / `output_format`, Responses `text.format`)
//! reaches every upstream kind in that kind's own shape, and the JSON comes back as text in the client's format,
//! streamed and whole; what a kind cannot combine is a 400 before anything is sent; with `[structured]`, an
//! answer that breaks its schema is asked for again and one that never matches is a typed error.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{text_reply, KindUpstreams};
use common::{Answer, Harness};

/// The upstream kinds the matrix covers: each way of asking for JSON (OpenAI `response_format`, Responses
/// `text.format`, Anthropic `output_config`, Gemini's response schema, Bedrock's forced tool).
const KINDS: [&str; 5] = [
    "openai",
    "openai-responses",
    "anthropic",
    "gemini",
    "bedrock",
];

fn place_schema() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"], "additionalProperties": false})
}

fn oslo() -> Value {
    json!({"city": "Oslo", "population": 709000})
}

/// The forced answer tool among the tools `request` offers (Anthropic's or Converse's shape).
fn answer_tool(request: &RecordedRequest) -> Option<Value> {
    let body = &request.body;
    let tools = body["tools"]
        .as_array()
        .or(body["toolConfig"]["tools"].as_array())?;
    tools
        .iter()
        .find(|t| t["name"] == "structured_answer" || t["toolSpec"]["name"] == "structured_answer")
        .cloned()
}

/// An answer of `answer` in `kind`'s shape: a call of the forced answer tool where the gateway asked for one,
/// otherwise text.
fn json_reply(kind: &str, request: &RecordedRequest, answer: &str) -> Reply {
    let forced = answer_tool(request).is_some();
    match kind {
        "bedrock" => {
            let input: Value =
                serde_json::from_str(answer).unwrap_or_else(|_| json!({"raw": answer}));
            Reply::bedrock_tool_use(&[("tooluse_a", "structured_answer", input)])
        }
        "anthropic" if forced => Reply::anthropic_stream(&[
            json!({"type":"message_start","message":{"id":"msg_a","type":"message","role":"assistant",
                "model":"claude-scripted","content":[],"usage":{"input_tokens":20,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_a",
                "name":"structured_answer","input":{}}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",
                "partial_json": answer}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},
                "usage":{"output_tokens":9}}),
            json!({"type":"message_stop"}),
        ]),
        _ => text_reply(kind, answer),
    }
}

async fn gateway(toml: &str) -> Harness {
    let file = ConfigFile::parse(toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await
}

/// The three inbound formats, each asking for `schema` its own way.
#[derive(Clone, Copy, Debug)]
enum Inbound {
    Chat,
    Messages,
    Responses,
}

const INBOUND: [Inbound; 3] = [Inbound::Chat, Inbound::Messages, Inbound::Responses];

impl Inbound {
    fn path(self) -> &'static str {
        match self {
            Inbound::Chat => "/v1/chat/completions",
            Inbound::Messages => "/v1/messages",
            Inbound::Responses => "/v1/responses",
        }
    }

    fn body(self, model: &str, stream: bool, schema: &Value) -> Value {
        let prompt = "Norway's capital and its population?";
        match self {
            Inbound::Chat => json!({"model": model, "stream": stream,
                "messages": [{"role": "user", "content": prompt}],
                "response_format": {"type": "json_schema",
                    "json_schema": {"name": "place", "schema": schema, "strict": true}}}),
            Inbound::Messages => json!({"model": model, "stream": stream, "max_tokens": 200,
                "messages": [{"role": "user", "content": prompt}],
                "output_config": {"format": {"type": "json_schema", "schema": schema}}}),
            Inbound::Responses => json!({"model": model, "stream": stream, "input": prompt,
                "text": {"format": {"type": "json_schema", "name": "place", "schema": schema,
                    "strict": true}}}),
        }
    }

    fn text(self, answer: &Answer, stream: bool) -> String {
        match self {
            Inbound::Chat => answer.chat_text(stream),
            Inbound::Messages => answer.messages_text(stream),
            Inbound::Responses => answer.responses_text(stream),
        }
    }

    /// The error's code in the client's format (an SSE error event when streamed).
    fn error_code(self, answer: &Answer, stream: bool) -> Value {
        let body = match (self, stream) {
            (_, false) => answer.json(),
            (Inbound::Chat, true) => answer.chunks().into_iter().last().unwrap(),
            (_, true) => answer.named_events().last().unwrap().1.clone(),
        };
        match self {
            Inbound::Responses if stream => body["code"].clone(),
            _ => body["error"]["code"].clone(),
        }
    }
}

/// That `request` asked `kind` for a JSON answer in `kind`'s own shape.
fn check_asked_for_json(kind: &str, request: &RecordedRequest) {
    let body = &request.body;
    match kind {
        "openai" => {
            let format = &body["response_format"];
            assert_eq!(format["type"], "json_schema", "{body}");
            assert_eq!(format["json_schema"]["strict"], true, "{body}");
            assert_eq!(
                format["json_schema"]["schema"]["required"],
                json!(["city", "population"])
            );
        }
        "openai-responses" => {
            let format = &body["text"]["format"];
            assert_eq!(format["type"], "json_schema", "{body}");
            assert_eq!(
                format["schema"]["properties"]["city"]["type"], "string",
                "{body}"
            );
        }
        "anthropic" => {
            let format = &body["output_config"]["format"];
            assert_eq!(format["type"], "json_schema", "{body}");
            assert_eq!(format["schema"]["additionalProperties"], false, "{body}");
        }
        "gemini" => {
            let config = &body["generationConfig"];
            assert_eq!(config["responseMimeType"], "application/json", "{body}");
            let schema = config
                .get("responseSchema")
                .or(config.get("responseJsonSchema"));
            assert!(
                schema.is_some_and(|s| s["properties"]["city"].is_object()),
                "{body}"
            );
        }
        "bedrock" => {
            // Forced by name beside the gateway's own tools: with `any` a model may call one and not answer.
            assert_eq!(
                body["toolConfig"]["toolChoice"],
                json!({"tool": {"name": "structured_answer"}}),
                "{body}"
            );
            let tool = answer_tool(request).unwrap_or_else(|| panic!("no answer tool: {body}"));
            assert_eq!(
                tool["toolSpec"]["inputSchema"]["json"]["properties"]["city"]["type"], "string",
                "{body}"
            );
        }
        other => panic!("no such kind {other}"),
    }
}

#[tokio::test]
async fn every_inbound_json_schema_reaches_every_kind_and_the_json_comes_back_as_text() {
    let answer = oslo().to_string();
    let upstreams = KindUpstreams::start(move |kind| {
        let answer = answer.clone();
        Box::new(move |request, _| json_reply(kind, request, &answer))
    })
    .await;
    let gw = gateway(&upstreams.toml()).await;
    for inbound in INBOUND {
        for kind in KINDS {
            for stream in [false, true] {
                let what = format!("{inbound:?} to {kind}, stream={stream}");
                let upstream = &upstreams.get(kind).server;
                let before = upstream.requests().len();
                let body = inbound.body(&format!("m-{kind}"), stream, &place_schema());
                let answer = gw.post_json(inbound.path(), &body, &[]).await;
                assert_eq!(answer.status, 200, "{what}: {}", answer.body);
                let text = inbound.text(&answer, stream);
                let value: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text:?}"));
                assert_eq!(value, oslo(), "{what}");
                let sent = upstream.requests();
                assert_eq!(sent.len(), before + 1, "{what}");
                check_asked_for_json(kind, &sent[before]);
            }
        }
    }
}

#[tokio::test]
async fn json_object_reaches_each_kind_in_its_shape() {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request, _| json_reply(kind, request, r#"{"ok": true}"#))
    })
    .await;
    let gw = gateway(&upstreams.toml()).await;
    for kind in KINDS {
        for stream in [false, true] {
            let what = format!("{kind}, stream={stream}");
            let body = json!({"model": format!("m-{kind}"), "stream": stream,
                "messages": [{"role": "user", "content": "any object"}],
                "response_format": {"type": "json_object"}});
            let answer = gw.chat(&body).await;
            assert_eq!(answer.status, 200, "{what}: {}", answer.body);
            let text = answer.chat_text(stream);
            assert_eq!(
                serde_json::from_str::<Value>(&text).ok(),
                Some(json!({"ok": true})),
                "{what}: {text}"
            );
            let sent = upstreams.get(kind).server.requests();
            let body = &sent.last().unwrap().body;
            match kind {
                "openai" => assert_eq!(body["response_format"], json!({"type": "json_object"})),
                "openai-responses" => {
                    assert_eq!(body["text"]["format"], json!({"type": "json_object"}))
                }
                "gemini" => assert_eq!(
                    body["generationConfig"]["responseMimeType"],
                    "application/json"
                ),
                "anthropic" => {
                    assert_eq!(body["tool_choice"], json!({"type": "any"}), "{body}");
                    let tool = answer_tool(sent.last().unwrap()).unwrap();
                    assert_eq!(tool["input_schema"], json!({"type": "object"}));
                }
                "bedrock" => {
                    // Forced by name beside the gateway's tools: with `any` a model may call one and not answer.
                    assert_eq!(
                        body["toolConfig"]["toolChoice"],
                        json!({"tool": {"name": "structured_answer"}})
                    );
                    assert!(answer_tool(sent.last().unwrap()).is_some());
                }
                _ => unreachable!(),
            }
        }
    }
}

#[tokio::test]
async fn a_json_answer_with_a_forced_tool_of_the_clients_own_is_a_400_where_the_answer_is_a_tool_call(
) {
    let upstreams =
        KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "never"))).await;
    let gw = gateway(&upstreams.toml()).await;
    for inbound in INBOUND {
        let mut body = inbound.body("m-bedrock", false, &place_schema());
        let (tool, choice) = match inbound {
            Inbound::Chat => (
                json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}),
                json!({"type": "function", "function": {"name": "lookup"}}),
            ),
            Inbound::Messages => (
                json!({"name": "lookup", "input_schema": {"type": "object"}}),
                json!({"type": "tool", "name": "lookup"}),
            ),
            Inbound::Responses => (
                json!({"type": "function", "name": "lookup", "parameters": {"type": "object"}}),
                json!({"type": "function", "name": "lookup"}),
            ),
        };
        body["tools"] = json!([tool]);
        body["tool_choice"] = choice;
        let answer = gw.post_json(inbound.path(), &body, &[]).await;
        assert_eq!(answer.status, 400, "{inbound:?}: {}", answer.body);
        assert!(
            answer.body.contains("cannot force its own tool `lookup`"),
            "{inbound:?}: {}",
            answer.body
        );
    }
    assert!(upstreams.get("bedrock").server.requests().is_empty());
}

/// `[structured]` with validation on, Gemini's answers not checked.
fn validating(upstreams: &KindUpstreams, repairs: usize) -> String {
    format!(
        "{}\n[structured]\nrepairs = {repairs}\n\n[structured.models]\n\"m-gemini\" = {{ validate = false }}\n\n\
         [structured.routes]\nresponses = {{ validate = true }}\n",
        upstreams.toml()
    )
}

#[tokio::test]
async fn an_answer_that_breaks_its_schema_is_repaired_and_only_the_repair_reaches_the_client() {
    // Each upstream first answers with the population as text, then as the schema says.
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request, _| {
            let repaired = request
                .body
                .to_string()
                .contains("does not match the requested JSON schema");
            let answer = if repaired {
                oslo().to_string()
            } else {
                r#"{"city": "Oslo", "population": "about 700k"}"#.to_owned()
            };
            json_reply(kind, request, &answer)
        })
    })
    .await;
    let gw = gateway(&validating(&upstreams, 1)).await;
    for inbound in INBOUND {
        for kind in ["openai", "anthropic", "bedrock"] {
            for stream in [false, true] {
                let what = format!("{inbound:?} to {kind}, stream={stream}");
                let upstream = &upstreams.get(kind).server;
                let before = upstream.requests().len();
                let body = inbound.body(&format!("m-{kind}"), stream, &place_schema());
                let answer = gw.post_json(inbound.path(), &body, &[]).await;
                assert_eq!(answer.status, 200, "{what}: {}", answer.body);
                let text = inbound.text(&answer, stream);
                assert_eq!(
                    serde_json::from_str::<Value>(&text).ok(),
                    Some(oslo()),
                    "{what}: {text:?}"
                );
                let sent = upstream.requests();
                assert_eq!(
                    sent.len(),
                    before + 2,
                    "{what}: the first answer and its repair"
                );
                assert!(
                    sent[before + 1].body.to_string().contains("/population"),
                    "{what}"
                );
            }
        }
    }
    // Validation off for this model: the first answer goes out as it came, with one call.
    let gemini = &upstreams.get("gemini").server;
    let answer = gw
        .post_json(
            "/v1/chat/completions",
            &Inbound::Chat.body("m-gemini", false, &place_schema()),
            &[],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.chat_text(false).contains("about 700k"));
    assert_eq!(gemini.requests().len(), 1);
    // …but validated on the one route whose entry says so.
    let answer = gw
        .post_json(
            Inbound::Responses.path(),
            &Inbound::Responses.body("m-gemini", false, &place_schema()),
            &[],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        serde_json::from_str::<Value>(&Inbound::Responses.text(&answer, false)).ok(),
        Some(oslo())
    );
    assert_eq!(gemini.requests().len(), 3, "the answer and its repair");
}

#[tokio::test]
async fn an_answer_that_never_matches_is_a_typed_error_in_the_clients_format() {
    let upstreams = KindUpstreams::start(|kind| {
        Box::new(move |request, _| json_reply(kind, request, r#"{"city": 7}"#))
    })
    .await;
    let gw = gateway(&validating(&upstreams, 1)).await;
    for inbound in INBOUND {
        for stream in [false, true] {
            let what = format!("{inbound:?}, stream={stream}");
            let upstream = &upstreams.get("openai").server;
            let before = upstream.requests().len();
            let body = inbound.body("m-openai", stream, &place_schema());
            let answer = gw.post_json(inbound.path(), &body, &[]).await;
            if !stream {
                assert_eq!(answer.status, 502, "{what}: {}", answer.body);
            }
            let tail = &answer.body[answer.body.len().saturating_sub(700)..];
            assert_eq!(
                inbound.error_code(&answer, stream),
                "answer_schema_mismatch",
                "{what}: {tail}"
            );
            assert!(
                answer.body.contains("/city: expected string"),
                "{what}: the violations are said"
            );
            assert_eq!(upstream.requests().len(), before + 2, "{what}: one repair");
        }
    }
}

/// The official SDKs' parse helpers (`chat.completions.parse`, `responses.parse`, Anthropic's `messages.parse`)
/// read a Pydantic model out of the gateway's answer over an OpenAI and an Anthropic upstream
/// (`tests/structured_client.py`; skips visibly without `python3` and `openai`, fails so with `CI` set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_parse_helpers_read_typed_answers_over_openai_and_anthropic() {
    let test = "the_official_sdks_parse_helpers_read_typed_answers_over_openai_and_anthropic";
    let Some(keys) = common::python_keys(test, "openai") else {
        return;
    };
    let answer = oslo().to_string();
    let upstreams = KindUpstreams::start(move |kind| {
        let answer = answer.clone();
        Box::new(move |request, _| json_reply(kind, request, &answer))
    })
    .await;
    let file = ConfigFile::parse(&upstreams.toml(), "gateway.toml").unwrap();
    let keys_path = keys.path().to_owned();
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        move |config| {
            config.file = file;
            config.api_keys_file = Some(keys_path);
        },
    )
    .await;
    let models = ["m-openai", "m-anthropic"];
    let mut args = vec![gw.base_url(), common::PYTHON_KEY.to_owned()];
    args.extend(models.iter().map(|m| m.to_string()));
    let checks: Vec<String> = models
        .iter()
        .flat_map(|m| {
            [
                format!("ok chat.completions.parse {m}"),
                format!("ok responses.parse {m}"),
            ]
        })
        .collect();
    let checks: Vec<&str> = checks.iter().map(String::as_str).collect();
    common::run_python("structured_client.py", &args, &checks).await;
    // What the SDKs sent arrived as each upstream's own structured-output parameter.
    let openai = upstreams.get("openai").server.requests();
    assert!(openai.len() >= 2, "{openai:?}");
    assert_eq!(
        openai[0].body["response_format"]["json_schema"]["name"],
        "Place"
    );
    assert_eq!(
        openai[0].body["response_format"]["json_schema"]["strict"],
        true
    );
    assert_eq!(
        openai[1].body["response_format"]["json_schema"]["name"],
        "Place"
    );
    let anthropic = upstreams.get("anthropic").server.requests();
    assert!(anthropic.len() >= 2, "{anthropic:?}");
    for request in &anthropic {
        check_asked_for_json("anthropic", request);
    }
}
