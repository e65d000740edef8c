//! `anthropic-vertex` targets: Claude on Vertex AI. The scripted upstream checks what Vertex AI checks — the
//! model and method in the path (`:rawPredict`, `:streamRawPredict` exactly when the body asks to stream), no
//! `model` in the body and Vertex's `anthropic_version` in it, the service account's bearer token — and answers
//! in the Messages format. Chat Completions and Messages clients run a tool round over it, whole and streamed;
//! Messages features (`anthropic-beta`, fields the gateway does not model) reach it as they reach `anthropic`;
//! a target without its project or location is refused where the file is read.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{
    call_path, carries, check_credential, streamed, text_reply, weather_call, KindUpstreams,
};
use common::{post, Harness};

const KIND: &str = "anthropic-vertex";
const MODEL: &str = "m-anthropic-vertex";
const WEATHER: &str = "sunny-21C";
const ANSWER: &str = "In Oslo it is sunny-21C.";

/// What Vertex AI refuses of a Claude request, as its 400 would say it; `None` for a request it takes.
fn vertex_refusal(request: &RecordedRequest) -> Option<String> {
    let stream = request.body["stream"] == true;
    if request.path != call_path(KIND, stream) {
        return Some(format!(
            "{} is not this model's method for stream={stream}",
            request.path
        ));
    }
    if request.body.get("model").is_some() {
        return Some("`model` is not a field of a Vertex AI request: the URL names it".into());
    }
    if request.body["anthropic_version"] != "vertex-2023-10-16" {
        return Some(format!(
            "anthropic_version: {}",
            request.body["anthropic_version"]
        ));
    }
    check_credential(KIND, request).err()
}

/// Claude on Vertex AI: a refusal as Vertex answers one, else the weather call until the result is sent.
async fn vertex_claude() -> KindUpstreams {
    KindUpstreams::start_only(&[KIND], |kind| {
        Box::new(move |request, _| match vertex_refusal(request) {
            Some(reason) => Reply::json(
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": reason}}),
            ),
            None if carries(request, WEATHER) => text_reply(kind, ANSWER),
            None => weather_call(kind),
        })
    })
    .await
}

async fn gateway(upstreams: &KindUpstreams) -> Harness {
    let toml = upstreams.toml();
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await
}

fn weather_tool() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

/// The call a Chat Completions answer asks for: its id and name.
fn chat_call(answer: &common::Answer, stream: bool) -> (String, String) {
    let call = if stream {
        answer
            .chunks()
            .into_iter()
            .find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0).cloned())
            .unwrap_or_else(|| panic!("no call streamed: {}", answer.body))
    } else {
        answer.json()["choices"][0]["message"]["tool_calls"][0].clone()
    };
    (
        call["id"].as_str().unwrap().to_owned(),
        call["function"]["name"].as_str().unwrap().to_owned(),
    )
}

/// The `tool_use` block a Messages answer asks for: its id and name.
fn messages_call(answer: &common::Answer, stream: bool) -> (String, String) {
    let block = if stream {
        answer
            .named_events()
            .into_iter()
            .find(|(name, e)| {
                name == "content_block_start" && e["content_block"]["type"] == "tool_use"
            })
            .map(|(_, e)| e["content_block"].clone())
            .unwrap_or_else(|| panic!("no tool_use streamed: {}", answer.body))
    } else {
        answer.json()["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .cloned()
            .unwrap_or_else(|| panic!("no tool_use: {}", answer.body))
    };
    (
        block["id"].as_str().unwrap().to_owned(),
        block["name"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn chat_completions_and_messages_clients_run_a_tool_round_on_claude_on_vertex() {
    let upstreams = vertex_claude().await;
    let gw = gateway(&upstreams).await;
    for stream in [false, true] {
        let question = json!({"role": "user", "content": "Weather in Oslo?"});
        let tools = json!([{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city", "parameters": weather_tool()}}]);
        let first = gw
            .chat(
                &json!({"model": MODEL, "messages": [question], "tools": tools, "stream": stream}),
            )
            .await;
        assert_eq!(first.status, 200, "stream={stream}: {}", first.body);
        let (id, name) = chat_call(&first, stream);
        assert_eq!(name, "get_weather", "stream={stream}");
        let second = gw
            .chat(&json!({"model": MODEL, "tools": tools, "stream": stream, "messages": [
                question,
                {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": id, "content": WEATHER},
            ]}))
            .await;
        assert_eq!(second.status, 200, "stream={stream}: {}", second.body);
        assert_eq!(second.chat_text(stream), ANSWER, "stream={stream}");

        let question = json!({"role": "user", "content": "Weather in Oslo?"});
        let tools = json!([{"name": "get_weather", "description": "The weather in a city",
            "input_schema": weather_tool()}]);
        let body = json!({"model": MODEL, "max_tokens": 1024, "messages": [question], "tools": tools,
            "stream": stream});
        let first = gw.post_json("/v1/messages", &body, &[]).await;
        assert_eq!(first.status, 200, "stream={stream}: {}", first.body);
        let (id, name) = messages_call(&first, stream);
        assert_eq!(name, "get_weather", "stream={stream}");
        let body = json!({"model": MODEL, "max_tokens": 1024, "tools": tools, "stream": stream,
        "messages": [
            question,
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "get_weather",
                "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": WEATHER}]},
        ]});
        let second = gw.post_json("/v1/messages", &body, &[]).await;
        assert_eq!(second.status, 200, "stream={stream}: {}", second.body);
        assert_eq!(second.messages_text(stream), ANSWER, "stream={stream}");
    }
    let sent = upstreams.get(KIND).server.requests();
    assert_eq!(sent.len(), 8, "two rounds, two formats, two shapes");
    for request in &sent {
        assert_eq!(vertex_refusal(request), None, "{request:#?}");
        assert!(request.query.is_none(), "{:?}", request.query);
    }
    assert_eq!(sent.iter().filter(|r| streamed(r)).count(), 4);
    // The result went back as Messages content, the max_tokens the client set with it.
    let last = &sent[7].body;
    assert_eq!(last["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(last["max_tokens"], 1024);
    assert_eq!(
        upstreams.tokens.requests().len(),
        1,
        "the token is kept while fresh"
    );
}

#[tokio::test]
async fn a_messages_request_reaches_claude_on_vertex_with_its_beta_header_and_unmodelled_fields() {
    let upstreams = vertex_claude().await;
    let gw = gateway(&upstreams).await;
    let body = json!({"model": MODEL, "max_tokens": 512, "stream": true,
        "messages": [{"role": "user", "content": "Weather in Oslo? It is sunny-21C."}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
            "trigger": {"value": 30000, "type": "input_tokens"}}]},
        "service_tier": "auto"});
    let answer = post(
        &gw.url("/v1/messages?beta=true"),
        body.to_string(),
        &[
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "context-management-2025-06-27"),
        ],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.messages_text(true), ANSWER);
    assert!(
        answer.headers.get("x-tower-chat-dropped").is_none(),
        "{:?}",
        answer.headers
    );
    let sent = &upstreams.get(KIND).server.requests()[0];
    assert_eq!(vertex_refusal(sent), None);
    assert_eq!(
        sent.headers["anthropic-beta"],
        "context-management-2025-06-27"
    );
    assert_eq!(sent.body["context_management"], body["context_management"]);
    assert_eq!(sent.body["service_tier"], "auto");
    // `?beta=true` asks the first-party API for its beta surface; Vertex AI's URL is the model's method.
    assert_eq!(sent.query, None);
}

#[tokio::test]
async fn a_model_id_that_would_change_the_vertex_url_is_refused_before_sending() {
    // A client's model goes into the URL as it is (`model = "*"`): one with a `/` would name another URL.
    let upstreams = vertex_claude().await;
    let toml = upstreams
        .toml()
        .replace("claude-sonnet-4-5@20250929", "*")
        .replace("name = \"m-anthropic-vertex\"", "name = \"claude-*\"");
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({})),
        |config| config.file = file,
    )
    .await;
    let answer = gw
        .chat(&json!({"model": "claude-x/../../other", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.body.contains("not a Vertex AI model id"),
        "{}",
        answer.body
    );
    assert!(upstreams.get(KIND).server.requests().is_empty());
}

#[test]
fn a_target_without_its_project_or_location_is_refused_where_the_file_is_read() {
    let target = |fields: &str| {
        format!(
            "[[upstreams.models]]\nname = \"claude\"\n\n[[upstreams.models.targets]]\n\
             provider = \"anthropic-vertex\"\nmodel = \"claude-sonnet-4-5@20250929\"\n{fields}\n"
        )
    };
    let refused = |fields: &str| {
        let text = target(fields);
        match ConfigFile::parse(&text, "g.toml") {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => (e.line(), e.message().to_owned()),
        }
    };
    for fields in [
        "location = \"us-east5\"\ntoken_env = \"T\"",
        "project = \"p\"\ntoken_env = \"T\"",
    ] {
        let (line, message) = refused(fields);
        assert_eq!(line, Some(4), "{message}");
        assert!(
            message.contains(
                "an `anthropic-vertex` target needs its Google Cloud `project` and `location`"
            ),
            "{message}"
        );
    }
    let (_, message) = refused("project = \"p/q\"\nlocation = \"us-east5\"\ntoken_env = \"T\"");
    assert!(message.contains("`project = \"p/q\"`"), "{message}");
    let (_, message) = refused("project = \"p\"\nlocation = \"us-east5\"\nkey_env = \"K\"");
    assert!(
        message.contains("`key_env` is not a credential of `anthropic-vertex` targets"),
        "{message}"
    );
    let (_, message) = refused(
        "project = \"p\"\nlocation = \"us-east5\"\nno_key = true\nschema_form = \"openapi\"",
    );
    assert!(message.contains("`schema_form` is for"), "{message}");
    let (_, message) = refused("project = \"p\"\nlocation = \"us-east5\"");
    assert!(message.contains("credentials_file"), "{message}");
    let file = ConfigFile::parse(
        &target("project = \"p\"\nlocation = \"global\"\ntoken_env = \"T\""),
        "g.toml",
    )
    .unwrap();
    assert_eq!(
        file.upstreams.models[0].targets[0].url(None),
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/publishers/anthropic"
    );
}

#[test]
fn a_single_anthropic_vertex_upstream_is_refused_at_start_naming_what_it_needs() {
    let error = match tower_chat_gateway::Config::parse(["--provider", "anthropic-vertex"]) {
        Err(error) => error,
        Ok(_) => panic!("accepted"),
    };
    assert!(
        matches!(&error, tower_chat_gateway::CliError::Upstream(_)),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("`project` and `location`"),
        "{error}"
    );
}
