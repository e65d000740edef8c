//! Images and documents through the gateway, translated between formats: an OpenAI-format image and PDF reach
//! an Anthropic upstream as `image` and `document` blocks, an Anthropic-format one reaches an OpenAI upstream
//! as `image_url` and `file` parts; a part the upstream cannot take is a 400 in the client's own format, and
//! nothing is sent. The official Python clients send the requests where they are installed
//! (`tests/media_client.py`); the raw-HTTP tests run everywhere.

mod common;

use std::process::Command;

use common::Harness;
use serde_json::json;
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat::Blob;
use tower_chat_gateway::config::Provider;

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];
const PDF: &[u8] = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n";

fn base64(bytes: &[u8]) -> String {
    Blob::new(bytes.to_vec(), "application/octet-stream")
        .base64()
        .to_owned()
}

fn anthropic_answer(text: &str) -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"usage":{"input_tokens":10,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}),
        json!({"type":"message_stop"}),
    ])
}

/// An Anthropic upstream that answers only when the image and the PDF arrived as Messages blocks.
fn anthropic_upstream(request: &RecordedRequest, _: usize) -> Reply {
    let content = &request.body["messages"][0]["content"];
    let image = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64(PNG)}});
    let document = json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": base64(PDF)}, "title": "report.pdf"});
    if content[1] == image && content[2] == document {
        anthropic_answer("saw image/png and application/pdf")
    } else {
        Reply::json(
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("unexpected content {content}")}}),
        )
    }
}

/// An OpenAI upstream that answers only when the image and the PDF arrived as Chat Completions parts.
fn openai_upstream(request: &RecordedRequest, _: usize) -> Reply {
    let content = &request.body["messages"][0]["content"];
    let image = json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", base64(PNG))}});
    let file = json!({"type": "file", "file": {"file_data": format!("data:application/pdf;base64,{}", base64(PDF)), "filename": "report.pdf"}});
    if content[1] == image && content[2] == file {
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

fn python_with(package: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {package}")])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Run `media_client.py` with `client` against a gateway in front of `upstream`; skips visibly without the
/// package.
async fn official_client(
    test: &str,
    client: &'static str,
    provider: Provider,
    upstream: fn(&RecordedRequest, usize) -> Reply,
) {
    if !python_with(client) {
        let reason =
            format!("the `{client}` Python package is not installed (pip install {client})");
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {reason}, and CI is set"
        );
        eprintln!("SKIPPED {test}: {reason}");
        println!("SKIPPED {test}: {reason}");
        return;
    }
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-python\n").unwrap();
    let keys_path = keys.path().to_owned();
    let gw = Harness::start(upstream, move |c| {
        c.provider = provider;
        c.api_keys_file = Some(keys_path);
    })
    .await;
    let base_url = match client {
        "openai" => gw.base_url(),
        _ => gw.url(""),
    };
    let script = format!("{}/tests/media_client.py", env!("CARGO_MANIFEST_DIR"));
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([
                &script,
                client,
                &base_url,
                "sk-python",
                &base64(PNG),
                &base64(PDF),
            ])
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for check in ["ok image and pdf answered", "ok unsupported part refused"] {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }
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
