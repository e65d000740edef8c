//! Images and documents through the gateway, translated between formats: an OpenAI-format image and PDF (Chat
//! Completions or Responses) reach an Anthropic upstream as `image` and `document` blocks, an Anthropic-format
//! one reaches an OpenAI upstream as `image_url` and `file` parts; a part the upstream cannot take is a 400 in
//! the client's own format, and nothing is sent. The official Python clients send the requests where they are
//! installed (`tests/media_client.py`); the raw-HTTP tests run everywhere.

use crate::common;

use common::Harness;
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config::Provider;
use tower_chat_testkit::{anthropic_text, base64, PDF, PNG};

/// An Anthropic upstream that answers only when the image and the PDF arrived as Messages blocks.
fn anthropic_upstream(request: &RecordedRequest, _: usize) -> Reply {
    let content = &request.body["messages"][0]["content"];
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64(PNG)}});
    let document = json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": base64(PDF)}, "title": "report.pdf"});
    if content[1] == image && content[2] == document {
        anthropic_text("claude-test", "saw image/png and application/pdf")
    } else {
        Reply::json(
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("unexpected content {content}")}}),
        )
    }
}

/// An OpenAI upstream that answers only when the image and the PDF arrived as Chat Completions parts (the
/// image with whatever `detail` the client chose).
fn openai_upstream(request: &RecordedRequest, _: usize) -> Reply {
    let content = &request.body["messages"][0]["content"];
    let image_url = format!("data:image/png;base64,{}", base64(PNG));
    let file = json!({"type": "file", "file": {"file_data": format!("data:application/pdf;base64,{}", base64(PDF)), "filename": "report.pdf"}});
    if content[1]["type"] == "image_url"
        && content[1]["image_url"]["url"] == image_url
        && content[2] == file
    {
        Reply::openai_text("saw image/png and application/pdf")
    } else {
        Reply::json(
            400,
            json!({"error": {"message": format!("unexpected content {content}")}}),
        )
    }
}

#[tokio::test]
async fn chat_completions_parts_reach_an_anthropic_upstream_as_blocks() {
    let gw = Harness::start(anthropic_upstream, |c| c.provider = Provider::Anthropic).await;
    let answer = gw
        .chat(&json!({
            "model": "claude-test",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What are these?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", base64(PNG))}},
                {"type": "file", "file": {"filename": "report.pdf",
                    "file_data": format!("data:application/pdf;base64,{}", base64(PDF))}},
            ]}],
        }))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"],
        "saw image/png and application/pdf"
    );
}

#[tokio::test]
async fn messages_blocks_reach_an_openai_upstream_as_parts() {
    let gw = Harness::start(openai_upstream, |_| {}).await;
    let answer = gw
        .post_json(
            "/v1/messages",
            &json!({
                "model": "gpt-test",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "What are these?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64(PNG)}},
                    {"type": "document", "title": "report.pdf",
                     "source": {"type": "base64", "media_type": "application/pdf", "data": base64(PDF)}},
                ]}],
            }),
            &[],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["content"][0]["text"],
        "saw image/png and application/pdf"
    );
}

#[tokio::test]
async fn a_part_the_upstream_cannot_take_is_a_400_naming_it_and_nothing_is_sent() {
    let gw = Harness::start(anthropic_upstream, |c| c.provider = Provider::Anthropic).await;
    let answer = gw
        .chat(&json!({
            "model": "claude-test",
            "messages": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
            ]}],
        }))
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let error = &answer.json()["error"];
    assert_eq!(error["code"], "unsupported_content", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("audio"),
        "{error}"
    );
    assert!(gw.provider.requests().is_empty());
}

#[tokio::test]
async fn malformed_base64_is_a_400_with_its_place() {
    let gw = Harness::start(openai_upstream, |_| {}).await;
    let answer = gw
        .chat(&json!({
            "model": "gpt-test",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,not base64!"}},
                ]},
            ],
        }))
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.body.contains("messages[1].content[0]"),
        "{}",
        answer.body
    );
    assert!(gw.provider.requests().is_empty());
}

/// Run `media_client.py` with `client` against a gateway in front of `upstream`; skips visibly without the
/// package.
async fn official_client(
    test: &str,
    client: &'static str,
    provider: Provider,
    upstream: fn(&RecordedRequest, usize) -> Reply,
) {
    let Some(keys) = common::python_keys(test, client) else {
        return;
    };
    let keys_path = keys.path().to_owned();
    let gw = Harness::start(upstream, move |c| {
        c.provider = provider;
        c.api_keys_file = Some(keys_path);
    })
    .await;
    let base_url = match client {
        "anthropic" => gw.url(""),
        _ => gw.base_url(),
    };
    let upstream_name = provider.as_str();
    let args = [
        client.to_owned(),
        base_url,
        common::PYTHON_KEY.to_owned(),
        base64(PNG),
        base64(PDF),
        upstream_name.to_owned(),
    ];
    common::run_python(
        "media_client.py",
        &args,
        &["ok image and pdf answered", "ok unsupported part refused"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_client_sends_an_image_and_a_pdf_to_an_anthropic_upstream() {
    official_client(
        "the_openai_python_client_sends_an_image_and_a_pdf_to_an_anthropic_upstream",
        "openai",
        Provider::Anthropic,
        anthropic_upstream,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_client_sends_an_image_and_a_pdf_to_an_openai_upstream() {
    official_client(
        "the_anthropic_python_client_sends_an_image_and_a_pdf_to_an_openai_upstream",
        "anthropic",
        Provider::OpenAi,
        openai_upstream,
    )
    .await;
}

#[tokio::test]
async fn media_is_capped_apart_from_the_text_body_limit() {
    let gw = Harness::start(openai_upstream, |c| {
        c.body_limit = 64 * 1024;
        c.limits.max_media_part_bytes = 300 * 1024;
        c.limits.max_media_bytes = 500 * 1024;
    })
    .await;
    let image = |bytes: usize| {
        let mut png = PNG.to_vec();
        png.resize(bytes, 0);
        json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", base64(&png))}})
    };
    let ask = |content: serde_json::Value| json!({"model": "gpt-test", "messages": [{"role": "user", "content": content}]});
    // 200 KiB of image in a body three times the text limit: media does not count against it.
    let answer = gw
        .chat(&ask(
            json!([{"type": "text", "text": "What are these?"}, image(200 * 1024)]),
        ))
        .await;
    assert_ne!(answer.status, 413, "{}", answer.body);
    // One part over its cap, and parts under it that are over the request's cap together.
    let answer = gw.chat(&ask(json!([image(400 * 1024)]))).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(
        answer.body.contains("--max-media-part-bytes"),
        "{}",
        answer.body
    );
    let answer = gw
        .chat(&ask(json!([
            image(180 * 1024),
            image(180 * 1024),
            image(180 * 1024)
        ])))
        .await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(answer.body.contains("--max-media-bytes"), "{}", answer.body);
    // Text over the body limit is still refused, media or not.
    let answer = gw
        .chat(&ask(
            json!([{"type": "text", "text": "x".repeat(100 * 1024)}, image(1024)]),
        ))
        .await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(gw.provider.requests().len() <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_client_sends_an_image_and_a_pdf_as_responses_input_to_an_anthropic_upstream(
) {
    official_client(
        "the_openai_python_client_sends_an_image_and_a_pdf_as_responses_input_to_an_anthropic_upstream",
        "responses",
        Provider::Anthropic,
        anthropic_upstream,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_client_sends_an_image_and_a_pdf_as_responses_input_to_an_openai_upstream(
) {
    official_client(
        "the_openai_python_client_sends_an_image_and_a_pdf_as_responses_input_to_an_openai_upstream",
        "responses",
        Provider::OpenAi,
        openai_upstream,
    )
    .await;
}

/// A Responses request asking about the test image and PDF, in the shape the `openai` SDK sends.
fn responses_media_request(stream: bool) -> serde_json::Value {
    json!({
        "model": "claude-test",
        "stream": stream,
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What are these?"},
            {"type": "input_image", "detail": "auto",
             "image_url": format!("data:image/png;base64,{}", base64(PNG))},
            {"type": "input_file", "filename": "report.pdf",
             "file_data": format!("data:application/pdf;base64,{}", base64(PDF))},
        ]}],
    })
}

#[tokio::test]
async fn responses_parts_reach_an_anthropic_upstream_as_blocks_streamed_and_not() {
    let gw = Harness::start(anthropic_upstream, |c| c.provider = Provider::Anthropic).await;
    let answer = gw
        .post_json("/v1/responses", &responses_media_request(false), &[])
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.json()["output"][0]["content"][0]["text"],
        "saw image/png and application/pdf"
    );
    let answer = gw
        .post_json("/v1/responses", &responses_media_request(true), &[])
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let events = answer.named_events();
    let (name, completed) = events.last().unwrap();
    assert_eq!(name, "response.completed", "{}", answer.body);
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        "saw image/png and application/pdf"
    );
    // The upstream saw the same bytes both times (it answers 400 otherwise); the second call streamed.
    let requests = gw.provider.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].body["stream"], true);
}

#[tokio::test]
async fn a_responses_tool_output_with_an_image_reaches_an_anthropic_upstream_as_a_tool_result_block(
) {
    let gw = Harness::start(
        |_: &RecordedRequest, _: usize| anthropic_text("claude-test", "a chart"),
        |c| c.provider = Provider::Anthropic,
    )
    .await;
    let answer = gw
        .post_json(
            "/v1/responses",
            &json!({"model": "claude-test", "input": [
                {"role": "user", "content": "Render the chart."},
                {"type": "function_call", "call_id": "toolu_1", "name": "render", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "toolu_1", "output": [
                    {"type": "input_text", "text": "rendered"},
                    {"type": "input_image", "detail": "auto",
                     "image_url": format!("data:image/png;base64,{}", base64(PNG))},
                ]},
            ]}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let messages = gw.upstream_messages(0);
    assert_eq!(
        messages[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "rendered"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64(PNG)}},
        ]})
    );
}

#[tokio::test]
async fn a_responses_part_the_upstream_cannot_take_is_a_400_naming_it_and_nothing_is_sent() {
    let gw = Harness::start(openai_upstream, |_| {}).await;
    let answer = gw
        .post_json(
            "/v1/responses",
            &json!({"model": "gpt-test", "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "Summarise"},
                {"type": "input_file", "file_url": "https://example.com/report.pdf"},
            ]}]}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let error = &answer.json()["error"];
    assert_eq!(error["code"], "unsupported_content", "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("file by URL"),
        "{error}"
    );
    assert!(gw.provider.requests().is_empty());
}

#[tokio::test]
async fn responses_media_is_capped_like_every_format() {
    let gw = Harness::start(openai_upstream, |c| {
        c.limits.max_media_part_bytes = 300 * 1024;
    })
    .await;
    let mut png = PNG.to_vec();
    png.resize(400 * 1024, 0);
    let answer = gw
        .post_json(
            "/v1/responses",
            &json!({"model": "gpt-test", "input": [{"role": "user", "content": [
                {"type": "input_image", "detail": "auto",
                 "image_url": format!("data:image/png;base64,{}", base64(&png))},
            ]}]}),
            &[],
        )
        .await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(
        answer.body.contains("--max-media-part-bytes"),
        "{}",
        answer.body
    );
    assert!(gw.provider.requests().is_empty());
}

/// The decoded media of all requests in flight are capped together: a request that would pass the cap is shed
/// at once with a 503 and `Retry-After`, in its own wire format; a request without media, or one arriving once a
/// stream has ended and given its media back, goes through.
#[tokio::test]
async fn over_the_media_in_flight_cap_a_request_is_shed_with_a_503_in_its_own_format() {
    let gw = Harness::start(common::hanging, |c| {
        c.connections.max_media_in_flight = 600 * 1024;
    })
    .await;
    let png = {
        let mut png = PNG.to_vec();
        png.resize(250 * 1024, 0);
        base64(&png)
    };
    let chat = json!({"model": "gpt-test", "stream": true, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
    ]}]});
    let messages = json!({"model": "claude-test", "max_tokens": 64, "stream": true, "messages": [
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        ]},
    ]});
    let open = |path: &'static str, body: &serde_json::Value| {
        let body = body.clone();
        let addr = gw.addr;
        async move { common::open_request(addr, None, path, &body).await }
    };
    // Two streams of 250 KiB each: 500 KiB of the 600 KiB in flight.
    let (first, head) = open("/v1/chat/completions", &chat).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_second, head) = open("/v1/chat/completions", &chat).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A third would pass the cap.
    let (_, refused) = open("/v1/chat/completions", &chat).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    assert!(
        refused.contains("overloaded") && refused.contains("--max-media-in-flight"),
        "{refused}"
    );
    let (_, refused) = open("/v1/messages", &messages).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    assert!(
        refused.contains(r#""type":"error""#) && refused.contains("--max-media-in-flight"),
        "Anthropic's error shape: {refused}"
    );
    assert_eq!(
        gw.provider.requests().len(),
        2,
        "nothing refused went upstream"
    );
    // Requests without media take none of the cap.
    let (_plain, head) = open("/v1/chat/completions", &common::request(true, "hi")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // A stream that ends gives its media back.
    drop(first);
    let head = loop {
        let (socket, head) = open("/v1/messages", &messages).await;
        if !head.starts_with("HTTP/1.1 503") {
            break (socket, head).1;
        }
        tokio::task::yield_now().await;
    };
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}
