//! The Gemini leaf over loopback against the scripted Gemini server: what the request carries (system
//! instruction, media parts, function declarations, tool config, generation config, signatures sent back), the
//! Gemini API and Vertex AI URLs and credentials, and the typed errors.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::gemini::{GeminiChat, PromptBlocked, SchemaForm};
use tower_chat::leaf::{AccessToken, TokenFuture, TokenProvider};
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::{
    AssistantMessage, ChatRequest, ChatStreamExt, ErrorKind, FilePart, FinishReason, MediaSource,
    Message, Part, ResponseFormat, ToolCall, ToolChoice, ToolSpec,
};

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn leaf(provider: &ScriptedProvider) -> GeminiChat {
    leaf_sending(provider, SchemaForm::JsonSchema)
}

fn leaf_sending(provider: &ScriptedProvider, form: SchemaForm) -> GeminiChat {
    GeminiChat::builder()
        .base_url(provider.base_url())
        .api_key("gemini-key-0123456789")
        .model("gemini-2.5-flash")
        .schema_form(form)
        .build()
        .unwrap()
}

/// Claude Code's tools as it sends them (Messages format), with their schemas as written.
fn claude_code_tools() -> Vec<ToolSpec> {
    let tools = fixture("claude_code_tools.json");
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| {
            ToolSpec::new(
                tool["name"].as_str().unwrap(),
                tool["description"].as_str().unwrap(),
                tool["input_schema"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn tool_schemas_go_as_json_schema_without_their_dialect() {
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text("Done")).await;
    let tools = claude_code_tools();
    let mut request = ChatRequest::new(vec![Message::user("Read a.txt")]).stream(false);
    request.options.tools = tools.clone().into();
    let reply = leaf(&provider).oneshot(request).await.unwrap();
    assert_eq!(reply.collect_response().await.unwrap().text(), "Done");
    let declarations = &provider.requests()[0].body["tools"][0]["functionDeclarations"];
    for (declared, tool) in declarations.as_array().unwrap().iter().zip(&tools) {
        assert!(declared.get("parameters").is_none(), "{declared}");
        let mut expected = tool.parameters.clone();
        expected.as_object_mut().unwrap().remove("$schema");
        assert_eq!(declared["parametersJsonSchema"], expected);
    }
    assert_eq!(
        declarations[0]["parametersJsonSchema"]["properties"]["limit"],
        json!({"type": "integer", "exclusiveMinimum": 0, "description": "The number of lines to read"})
    );
}

#[tokio::test]
async fn the_openapi_subset_lowers_what_it_cannot_express() {
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text("Done")).await;
    let mut request = ChatRequest::new(vec![Message::user("Read a.txt")]).stream(false);
    request.options.tools = claude_code_tools().into();
    let leaf = leaf_sending(&provider, SchemaForm::OpenApiSubset);
    let reply = leaf.oneshot(request).await.unwrap();
    assert_eq!(reply.collect_response().await.unwrap().text(), "Done");
    let declarations = &provider.requests()[0].body["tools"][0]["functionDeclarations"];
    assert!(declarations[0].get("parametersJsonSchema").is_none());
    assert_eq!(
        declarations[0]["parameters"],
        json!({"type": "object", "properties": {
            "file_path": {"type": "string", "description": "The absolute path to the file to read"},
            "offset": {"type": "number", "description": "The line number to start reading from"},
            "limit": {"type": "integer", "minimum": 1, "description": "The number of lines to read"}},
            "required": ["file_path"]})
    );
    assert_eq!(
        declarations[1]["parameters"]["properties"],
        json!({"prompt": {"type": "string"}, "env": {"type": "object"}, "metadata": {"type": "object"}})
    );
}

#[tokio::test]
async fn a_conversation_with_media_tools_and_options_is_encoded_as_gemini_expects() {
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text("Done")).await;
    let png = Bytes::from_static(b"\x89PNG\r\n\x1a\nfake");
    let history = vec![
        Message::system("You are terse."),
        Message::user(vec![
            Part::text("What is in these?"),
            Part::image(png, "image/png"),
            Part::image_url("https://example.com/cat.jpg"),
            Part::file(
                b"%PDF-1.7".to_vec(),
                "application/pdf",
                Some("report.pdf".into()),
            ),
            Part::from(FilePart {
                source: MediaSource::Url {
                    url: "gs://bucket/report".into(),
                },
                media_type: Some("application/pdf".into()),
                name: None,
                cache: None,
            }),
        ]),
        Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: Vec::new(),
            tool_calls: vec![ToolCall::new("c1", "lookup", json!({"q": "cats"}))],
            provider_parts: Vec::new(),
        }),
        Message::tool_result("c1", "lookup", r#"{"hits": 3}"#),
        Message::user("And now?"),
    ];
    let mut request = ChatRequest::new(history)
        .tool(ToolSpec::new(
            "lookup",
            "Search",
            json!({"type": "object", "properties": {"q": {"type": ["string", "null"]}}, "required": ["q"],
                   "additionalProperties": false}),
        ))
        .stream(false);
    request.options.tool_choice = Some(ToolChoice::Tool("lookup".into()));
    request.options.temperature = Some(0.5);
    request.options.max_output_tokens = Some(256);
    request.options.stop = vec!["END".into()];
    let reply = leaf_sending(&provider, SchemaForm::OpenApiSubset)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(reply.text(), "Done");

    let sent = &provider.requests()[0];
    assert_eq!(sent.path, "/v1/models/gemini-2.5-flash:generateContent");
    assert_eq!(sent.query, None);
    assert_eq!(sent.headers["x-goog-api-key"], "gemini-key-0123456789");
    let body = &sent.body;
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "You are terse."}]})
    );
    let contents = body["contents"].as_array().unwrap();
    assert_eq!(
        contents
            .iter()
            .map(|c| c["role"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["user", "model", "user"]
    );
    let user = &contents[0]["parts"];
    assert_eq!(user[0], json!({"text": "What is in these?"}));
    assert_eq!(user[1]["inlineData"]["mimeType"], "image/png");
    assert_eq!(user[1]["inlineData"]["data"], "iVBORw0KGgpmYWtl");
    assert_eq!(
        user[2],
        json!({"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}})
    );
    assert_eq!(user[3]["inlineData"]["mimeType"], "application/pdf");
    assert_eq!(
        user[4],
        json!({"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/report"}})
    );
    assert_eq!(
        contents[1]["parts"],
        json!([{"functionCall": {"name": "lookup", "args": {"q": "cats"}}}])
    );
    // The function response and the next user text share a user turn.
    assert_eq!(
        contents[2]["parts"],
        json!([{"functionResponse": {"name": "lookup", "response": {"hits": 3}}}, {"text": "And now?"}])
    );
    assert_eq!(
        body["tools"],
        json!([{"functionDeclarations": [{"name": "lookup", "description": "Search", "parameters":
            {"type": "object", "properties": {"q": {"type": "string", "nullable": true}}, "required": ["q"]}}]}])
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}})
    );
    assert_eq!(
        body["generationConfig"],
        json!({"temperature": 0.5, "maxOutputTokens": 256, "stopSequences": ["END"]})
    );
}

#[tokio::test]
async fn a_schema_the_openapi_subset_cannot_express_is_refused_before_sending() {
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text("never")).await;
    let request = ChatRequest::new(vec![Message::user("hi")]).tool(ToolSpec::new(
        "pick",
        "",
        json!({"type": "object", "properties": {"n": {"allOf": [{"type": "integer"}, {"not": {"const": 3}}]}}}),
    ));
    let err = leaf_sending(&provider, SchemaForm::OpenApiSubset)
        .oneshot(request)
        .await
        .err()
        .expect("refused");
    assert_eq!(err.kind(), &ErrorKind::Unsupported);
    assert!(err.message().contains("\"pick\""), "{err}");
    assert!(err.message().contains("/properties/n/allOf"), "{err}");
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn an_answer_schema_over_the_schema_limits_is_refused_before_sending() {
    // Four `$ref`s per level, ten levels: inlined (`responseSchema`) it is millions of values.
    let mut defs = serde_json::Map::new();
    defs.insert("d0".into(), json!({"type": "string"}));
    for level in 1..=10 {
        let below = json!({"$ref": format!("#/$defs/d{}", level - 1)});
        defs.insert(
            format!("d{level}"),
            json!({"type": "object", "properties": {"a": below, "b": below, "c": below, "d": below}}),
        );
    }
    let schema = json!({"$defs": defs, "$ref": "#/$defs/d10"});
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text("never")).await;
    let mut request = ChatRequest::new(vec![Message::user("hi")]);
    request.options.response_format = Some(ResponseFormat::JsonSchema {
        name: "answer".into(),
        schema,
        strict: Some(true),
    });
    let err = leaf(&provider)
        .oneshot(request)
        .await
        .err()
        .expect("refused");
    assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
    assert!(err.message().ends_with("(max_expanded_nodes)"), "{err}");
    assert!(provider.requests().is_empty());
}

#[derive(Debug)]
struct GoogleOAuth;

impl TokenProvider for GoogleOAuth {
    fn fetch_token(&self) -> TokenFuture<'_> {
        Box::pin(async {
            Ok(AccessToken::new(
                "ya29.vertex-token",
                Some(Duration::from_secs(3599)),
            ))
        })
    }
}

#[tokio::test]
async fn vertex_ai_takes_the_same_wire_with_a_bearer_token() {
    let provider = ScriptedProvider::start(|_, _| Reply::gemini_text("Hello from Vertex")).await;
    let leaf = GeminiChat::builder()
        .vertex("my-project", "us-central1")
        // The scripted server stands in for the regional host; the path keeps Vertex's shape.
        .base_url(format!(
            "http://{}/v1/projects/my-project/locations/us-central1/publishers/google",
            provider.addr()
        ))
        .model("gemini-2.5-pro")
        .token_provider(GoogleOAuth)
        .build()
        .unwrap();
    let reply = leaf
        .oneshot(ChatRequest::new(vec![Message::user("Hi")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(reply.text(), "Hello from Vertex");
    let sent = &provider.requests()[0];
    assert_eq!(
        sent.path,
        "/v1/projects/my-project/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    );
    assert_eq!(sent.query.as_deref(), Some("alt=sse"));
    assert_eq!(sent.headers["authorization"], "Bearer ya29.vertex-token");
    assert!(sent.headers.get("x-goog-api-key").is_none());
}

#[tokio::test]
async fn a_blocked_prompt_and_a_quota_error_are_typed() {
    let blocked = fixture("gemini_prompt_blocked.json");
    let quota = fixture("gemini_error_429.json");
    let provider = ScriptedProvider::start(move |request, _| {
        if request.body["contents"][0]["parts"][0]["text"] == "quota" {
            Reply::json(429, quota.clone())
        } else {
            Reply::gemini_stream(std::slice::from_ref(&blocked))
        }
    })
    .await;
    for stream in [true, false] {
        let request = ChatRequest::new(vec![Message::user("something harmful")]).stream(stream);
        let items: Vec<_> = futures_util::StreamExt::collect::<Vec<_>>(
            leaf(&provider).oneshot(request).await.unwrap(),
        )
        .await;
        let err = items
            .into_iter()
            .find_map(Result::err)
            .expect("an error item");
        assert_eq!(err.kind(), &ErrorKind::InvalidRequest);
        assert_eq!(PromptBlocked::of(&err).unwrap().reason, "SAFETY");
    }
    let err = leaf(&provider)
        .oneshot(ChatRequest::new(vec![Message::user("quota")]))
        .await
        .err()
        .expect("a 429");
    assert!(matches!(err.kind(), ErrorKind::RateLimited { .. }), "{err}");
    assert!(
        err.message().starts_with("You exceeded your current quota"),
        "{err}"
    );
    assert!(!err.to_string().contains("gemini-key-0123456789"));
}

#[tokio::test]
async fn streamed_and_whole_answers_agree_and_cut_streams_decode_the_same() {
    let provider = ScriptedProvider::start(|request, index| {
        let reply = Reply::gemini_function_calls(
            &[
                ("get_weather", json!({"location": "Paris"})),
                ("get_weather", json!({"location": "London"})),
            ],
            Some("sig-1"),
        );
        let _ = request;
        if index == 2 {
            reply.rechunked(3)
        } else {
            reply
        }
    })
    .await;
    let mut replies = Vec::new();
    for stream in [true, false, true] {
        let request = ChatRequest::new(vec![Message::user("Weather?")]).stream(stream);
        replies.push(
            leaf(&provider)
                .oneshot(request)
                .await
                .unwrap()
                .collect_response()
                .await
                .unwrap(),
        );
    }
    assert_eq!(replies[0], replies[1]);
    assert_eq!(replies[0], replies[2]);
    let reply = &replies[0];
    assert_eq!(reply.finish_reason, Some(FinishReason::ToolCalls));
    let Message::Assistant(assistant) = &reply.messages[0] else {
        panic!("{reply:?}")
    };
    assert_eq!(assistant.tool_calls.len(), 2);
    assert_eq!(assistant.reasoning.len(), 1, "the signature is kept");
    assert_eq!(reply.usage.reasoning_tokens, Some(40));
    assert_eq!(reply.usage.output_tokens, 48);
}
