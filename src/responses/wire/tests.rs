//! The Responses request body, checked field by field.

use super::*;
use crate::content::{FilePart, ImageDetail, ImagePart, ProviderPart};
use crate::error::ErrorKind;
use crate::message::ToolMessage;
use crate::reasoning::ReasoningPart;
use crate::request::ChatOptions;
use serde_json::json;

fn include() -> Vec<String> {
    vec!["reasoning.encrypted_content".to_owned()]
}

fn encode_with(request: &ChatRequest) -> Result<Value, ChatError> {
    let include = include();
    let opts = EncodeOptions {
        default_model: Some("gpt-5-mini"),
        store: false,
        include: &include,
        tools: &ToolsJson::default(),
    };
    encode(request, &opts).map(|bytes| serde_json::from_slice(&bytes).unwrap())
}

fn reasoning(id: &str, encrypted: &str, summary: &[&str]) -> ReasoningPart {
    ReasoningPart {
        text: summary.join("\n\n"),
        continuation: Some(Continuation::OpenAiReasoning {
            id: id.into(),
            encrypted_content: Some(encrypted.into()),
            summary: summary.iter().map(|s| s.to_string()).collect(),
        }),
    }
}

#[test]
fn a_tool_round_encodes_as_input_items_with_its_reasoning_first() {
    let mut request = ChatRequest::new(vec![
        Message::system("be brief"),
        Message::user("weather in Oslo?"),
        Message::Assistant(AssistantMessage {
            content: String::new(),
            reasoning: vec![
                reasoning("rs_1", "gAAAA+/=\u{e9}", &["Look it up.", "Then answer."]),
                ReasoningPart {
                    text: "thinking".into(),
                    continuation: Some(Continuation::AnthropicThinking {
                        signature: "sig".into(),
                    }),
                },
                ReasoningPart::text("plain"),
            ],
            tool_calls: vec![ToolCall::new("call_1", "weather", json!({"city": "Oslo"}))],
            provider_parts: Vec::new(),
        }),
        Message::Tool(ToolMessage::success("call_1", "weather", "12C")),
    ]);
    *request.options = ChatOptions {
        tools: vec![ToolSpec::new("weather", "w", json!({"type": "object"}))].into(),
        tool_choice: Some(ToolChoice::Tool("weather".into())),
        max_output_tokens: Some(200),
        temperature: Some(0.5),
        extra: json!({"reasoning_effort": "low"})
            .as_object()
            .unwrap()
            .clone(),
        ..ChatOptions::default()
    };
    let body = encode_with(&request).unwrap();
    assert_eq!(body["model"], "gpt-5-mini");
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["input"],
        json!([
            {"type": "message", "role": "system", "content": "be brief"},
            {"type": "message", "role": "user", "content": "weather in Oslo?"},
            {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA+/=\u{e9}",
             "summary": [{"type": "summary_text", "text": "Look it up."},
                         {"type": "summary_text", "text": "Then answer."}]},
            {"type": "function_call", "call_id": "call_1", "name": "weather",
             "arguments": "{\"city\":\"Oslo\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "12C"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "weather", "description": "w",
                "parameters": {"type": "object"}, "strict": false}])
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "weather"})
    );
    assert_eq!(body["max_output_tokens"], 200);
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["reasoning"], json!({"effort": "low"}));
    assert!(body.get("reasoning_effort").is_none());
}

#[test]
fn store_and_include_are_the_caller_s_to_override() {
    let mut request = ChatRequest::new(vec![Message::user("hi")]).stream(false);
    request.options.extra =
        json!({"store": true, "include": [], "reasoning": {"effort": "high", "summary": "auto"}})
            .as_object()
            .unwrap()
            .clone();
    let body = encode_with(&request).unwrap();
    assert_eq!(body["stream"], false);
    assert_eq!(body["store"], true);
    assert_eq!(body["include"], json!([]));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
}

#[test]
fn media_parts_become_input_parts_and_tool_media_stays_in_the_output() {
    let pdf = Part::file(
        &b"%PDF-1.4"[..],
        "application/pdf",
        Some("a.pdf".to_owned()),
    );
    let request = ChatRequest::new(vec![
        Message::user(vec![
            Part::text("what is this?"),
            Part::image_url("https://example.com/cat.png"),
            Part::from(ImagePart {
                source: MediaSource::FileId {
                    id: "file_img".into(),
                },
                detail: Some(ImageDetail::Low),
                cache: None,
            }),
            pdf,
            Part::from(FilePart {
                source: MediaSource::Url {
                    url: "https://example.com/report.pdf".into(),
                },
                media_type: None,
                name: None,
                cache: None,
            }),
        ]),
        Message::Tool(ToolMessage::success(
            "call_1",
            "render",
            vec![
                Part::text("rendered"),
                Part::image(&b"\x89PNG"[..], "image/png"),
            ],
        )),
    ]);
    let body = encode_with(&request).unwrap();
    let user = &body["input"][0]["content"];
    assert_eq!(
        user[0],
        json!({"type": "input_text", "text": "what is this?"})
    );
    assert_eq!(
        user[1],
        json!({"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"})
    );
    assert_eq!(
        user[2],
        json!({"type": "input_image", "file_id": "file_img", "detail": "low"})
    );
    assert_eq!(user[3]["type"], "input_file");
    assert_eq!(user[3]["filename"], "a.pdf");
    assert!(user[3]["file_data"]
        .as_str()
        .unwrap()
        .starts_with("data:application/pdf;base64,"));
    assert_eq!(
        user[4],
        json!({"type": "input_file", "file_url": "https://example.com/report.pdf"})
    );
    let output = &body["input"][1]["output"];
    assert_eq!(output[0], json!({"type": "input_text", "text": "rendered"}));
    assert_eq!(output[1]["type"], "input_image");
    assert!(output[1]["image_url"]
        .as_str()
        .unwrap()
        .starts_with("data:image/png;base64,"));
}

#[test]
fn what_this_api_cannot_take_is_refused_before_sending() {
    let audio = ChatRequest::new(vec![Message::user(vec![Part::audio(
        &b"RIFF"[..],
        "audio/wav",
    )])]);
    let chat_part = ChatRequest::new(vec![Message::user(vec![Part::from(ProviderPart {
        provider: "openai".into(),
        value: json!({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}),
    })])]);
    let chat_shaped = ChatRequest::new(vec![Message::user(vec![Part::from(ProviderPart {
        provider: "openai".into(),
        value: json!({"type": "image_url", "image_url": {"url": "https://x"}}),
    })])]);
    let mut stop = ChatRequest::new(vec![Message::user("hi")]);
    stop.options.stop = vec!["END".into()];
    for request in [audio, chat_shaped, stop] {
        let err = encode_with(&request).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::Unsupported, "{err}");
        assert!(err.is_refused_before_sending());
    }
    // A part already in this API's shape goes as it came.
    let body = encode_with(&chat_part).unwrap();
    assert_eq!(body["input"][0]["content"][0]["type"], "input_audio");
}

#[test]
fn response_formats_go_in_text_format() {
    let mut request = ChatRequest::new(vec![Message::user("hi")]);
    request.options.response_format = Some(ResponseFormat::JsonSchema {
        name: "out".into(),
        schema: json!({"type": "object"}),
        strict: Some(true),
    });
    let body = encode_with(&request).unwrap();
    // Strict: the schema in strict mode's shape (every object closed, every property listed as required).
    assert_eq!(
        body["text"],
        json!({"format": {"type": "json_schema", "name": "out", "strict": true,
            "schema": {"type": "object", "properties": {}, "required": [], "additionalProperties": false}}})
    );
    request.options.response_format = Some(ResponseFormat::JsonSchema {
        name: "out".into(),
        schema: json!({"type": "object"}),
        strict: None,
    });
    let body = encode_with(&request).unwrap();
    assert_eq!(
        body["text"],
        json!({"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}}})
    );
}
