//! `azure-responses` targets: the Responses API on Azure OpenAI. The scripted upstream checks what Azure checks —
//! the v1 path without an `api-version` (or the dated path with one), the `api-key` header, the deployment as the
//! body's `model`, a Responses body — and answers in the Responses format. Chat Completions and Responses clients
//! run a tool round over it, whole and streamed; a target without its resource's endpoint is refused where the
//! file is read.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{carries, check_credential, streamed, text_reply, weather_call, KindUpstreams};
use common::Harness;

const KIND: &str = "azure-responses";
const MODEL: &str = "m-azure-responses";
const WEATHER: &str = "sunny-21C";
const ANSWER: &str = "In Oslo it is sunny-21C.";
const DATED: &str = "2025-04-01-preview";

/// What Azure refuses of a Responses request, as its 404 or 400 would say it; `None` for a request it takes.
fn azure_refusal(request: &RecordedRequest) -> Option<String> {
    let url = (request.path.as_str(), request.query.as_deref());
    let dated = format!("api-version={DATED}");
    if url != ("/openai/v1/responses", None) && url != ("/openai/responses", Some(dated.as_str())) {
        return Some(format!("no such route: {url:?}"));
    }
    if request.body["model"] != "gpt-5-mini-prod" {
        return Some(format!("no deployment {}", request.body["model"]));
    }
    if !request.body["input"].is_array() || request.body.get("messages").is_some() {
        return Some("not a Responses request".into());
    }
    check_credential(KIND, request).err()
}

async fn azure_responses() -> KindUpstreams {
    KindUpstreams::start_only(&[KIND], |kind| {
        Box::new(move |request, _| match azure_refusal(request) {
            Some(reason) => Reply::json(
                400,
                json!({"error": {"code": "bad_request", "message": reason}}),
            ),
            None if carries(request, WEATHER) => text_reply(kind, ANSWER),
            None => weather_call(kind),
        })
    })
    .await
}

async fn gateway(toml: &str) -> Harness {
    let file = ConfigFile::parse(toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await
}

fn weather_tool() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

/// A Chat Completions tool round and a Responses one against `gw`, whole and streamed.
async fn tool_rounds(gw: &Harness) {
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
        let call = if stream {
            first
                .chunks()
                .into_iter()
                .find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0).cloned())
                .unwrap_or_else(|| panic!("no call streamed: {}", first.body))
        } else {
            first.json()["choices"][0]["message"]["tool_calls"][0].clone()
        };
        assert_eq!(call["function"]["name"], "get_weather", "stream={stream}");
        let id = call["id"].as_str().unwrap();
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

        let tools = json!([{"type": "function", "name": "get_weather", "description": "The weather in a city",
            "parameters": weather_tool()}]);
        let body = json!({"model": MODEL, "input": "Weather in Oslo?", "tools": tools, "stream": stream,
            "store": false});
        let first = gw.post_json("/v1/responses", &body, &[]).await;
        assert_eq!(first.status, 200, "stream={stream}: {}", first.body);
        let item = if stream {
            first
                .named_events()
                .into_iter()
                .find(|(name, e)| {
                    name == "response.output_item.done" && e["item"]["type"] == "function_call"
                })
                .map(|(_, e)| e["item"].clone())
                .unwrap_or_else(|| panic!("no call streamed: {}", first.body))
        } else {
            first.json()["output"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["type"] == "function_call")
                .cloned()
                .unwrap_or_else(|| panic!("no call: {}", first.body))
        };
        assert_eq!(item["name"], "get_weather", "stream={stream}");
        let body = json!({"model": MODEL, "tools": tools, "stream": stream, "store": false, "input": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"type": "function_call", "call_id": item["call_id"], "name": "get_weather",
                "arguments": "{\"city\": \"Oslo\"}"},
            {"type": "function_call_output", "call_id": item["call_id"], "output": WEATHER},
        ]});
        let second = gw.post_json("/v1/responses", &body, &[]).await;
        assert_eq!(second.status, 200, "stream={stream}: {}", second.body);
        assert_eq!(second.responses_text(stream), ANSWER, "stream={stream}");
    }
}

#[tokio::test]
async fn chat_completions_and_responses_clients_run_a_tool_round_on_the_v1_responses_api() {
    let upstreams = azure_responses().await;
    let gw = gateway(&upstreams.toml()).await;
    tool_rounds(&gw).await;
    let sent = upstreams.get(KIND).server.requests();
    assert_eq!(sent.len(), 8, "two rounds, two formats, two shapes");
    for request in &sent {
        assert_eq!(azure_refusal(request), None, "{request:#?}");
        assert_eq!(request.path, "/openai/v1/responses");
        assert!(request.headers.get("authorization").is_none());
    }
    assert_eq!(sent.iter().filter(|r| streamed(r)).count(), 4);
    let last = &sent[7].body;
    assert!(carries(&sent[7], WEATHER), "{last}");
    assert!(last["input"]
        .as_array()
        .unwrap()
        .iter()
        .any(|item| item["type"] == "function_call_output"));
}

#[tokio::test]
async fn an_api_version_calls_the_dated_responses_url() {
    let upstreams = azure_responses().await;
    let toml = upstreams.toml().replace(
        "key_env =",
        &format!("api_version = \"{DATED}\"\nkey_env ="),
    );
    let gw = gateway(&toml).await;
    let answer = gw
        .chat(&json!({"model": MODEL, "messages": [{"role": "user", "content": WEATHER}]}))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.chat_text(false), ANSWER);
    let sent = &upstreams.get(KIND).server.requests()[0];
    assert_eq!(azure_refusal(sent), None);
    assert_eq!(sent.path, "/openai/responses");
    assert_eq!(
        sent.query.as_deref(),
        Some("api-version=2025-04-01-preview")
    );
}

#[test]
fn a_target_without_its_resource_endpoint_is_refused_where_the_file_is_read() {
    let target = |fields: &str| {
        format!(
            "[[upstreams.models]]\nname = \"gpt\"\n\n[[upstreams.models.targets]]\n\
             provider = \"azure-responses\"\nmodel = \"gpt-5-mini-prod\"\n{fields}\n"
        )
    };
    let refused = |fields: &str| {
        let text = target(fields);
        match ConfigFile::parse(&text, "g.toml") {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => (e.line(), e.message().to_owned()),
        }
    };
    let (line, message) = refused("key_env = \"K\"");
    assert_eq!(line, Some(4), "{message}");
    assert!(
        message.contains("an `azure-responses` target needs its resource's endpoint"),
        "{message}"
    );
    let (_, message) = refused(
        "base_url = \"https://r.openai.azure.com\"\nazure_deployment = \"d\"\nkey_env = \"K\"",
    );
    assert!(message.contains("`azure_deployment` is for"), "{message}");
    let (_, message) = refused(
        "base_url = \"https://r.openai.azure.com\"\napi_version = \"a/b\"\nkey_env = \"K\"",
    );
    assert!(message.contains("`api_version = \"a/b\"`"), "{message}");
    let (_, message) =
        refused("base_url = \"https://r.openai.azure.com\"\nkey_env = \"K\"\ntoken_env = \"T\"");
    assert!(message.contains("exclude each other"), "{message}");
}
