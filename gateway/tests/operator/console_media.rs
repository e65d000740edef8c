//! Stored media on the console's timeline, over plain HTTP: raster images are thumbnails whose bytes come from
//! `/console/media` with their type, `nosniff` and a sandboxing policy; SVG, HTML and everything else is only
//! ever an attachment; large images are links; names are escaped; nothing is served without a session, to
//! another site, or for a part the record does not hold.

use crate::common;

use std::time::SystemTime;

use bytes::Bytes;
use common::{console_login, send, Answer, Harness};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tower_chat::test_server::Reply;
use tower_chat::{ChatOptions, ChatResponse, ConversationId, Message, Part, Shared};
use tower_chat_persistence::{
    CallId, CallOutcome, CallRecord, ConversationQuery, RecordedRequest, Store,
};
use tower_chat_testkit::{base64, PDF, PNG};

const OPS_KEY: &str = "sk-ops-carol-0123456789";
const HOSTILE_NAME: &str = "<script>alert(1)</script>.html";
const SVG: &[u8] = b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(2)\"></svg>";

/// A gateway with an operator key (its file lives as long as the returned directory).
async fn gateway() -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let operators = dir.path().join("operators");
    std::fs::write(&operators, format!("carol:{OPS_KEY}\n")).unwrap();
    let gw = Harness::start(
        |_, _| Reply::openai_text("ok"),
        move |c| c.operator_keys_file = Some(operators),
    )
    .await;
    (gw, dir)
}

/// A GET whose body is bytes (media is not text).
async fn fetch(url: &str, headers: &[(&str, &str)]) -> (http::StatusCode, http::HeaderMap, Bytes) {
    let client =
        Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(HttpConnector::new());
    let mut request = http::Request::get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    let (head, body) = response.into_parts();
    (
        head.status,
        head.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers.get(name).map_or("", |v| v.to_str().unwrap_or(""))
}

/// A completed call whose user message holds `parts`, written to the gateway's own database.
async fn record_with(gw: &Harness, conversation: &str, parts: Vec<Part>) -> CallId {
    let store = gw.records().await;
    let call_id = CallId::generate();
    let record = CallRecord {
        call_id: call_id.clone(),
        conversation_id: ConversationId::new(conversation),
        caller: None,
        request_id: None,
        team: None,
        round_index: 0,
        started_at: SystemTime::now(),
        first_token_at: None,
        ended_at: SystemTime::now(),
        provider: None,
        model: Some("m".into()),
        request: RecordedRequest {
            messages: Shared::new(vec![Message::user(parts)]),
            options: Shared::new(ChatOptions::default()),
            omitted: None,
        },
        response: ChatResponse {
            messages: vec![Message::assistant("seen")],
            ..ChatResponse::default()
        },
        outcome: CallOutcome::Completed,
        cost: None,
        usage_estimated: false,
        guardrail: Vec::new(),
    };
    store.write_calls(&[record]).await.unwrap();
    call_id
}

fn media_url(gw: &Harness, call: &CallId, part: usize) -> String {
    gw.url(&format!(
        "/console/media?call={}&message=0&part={part}",
        call.as_str()
    ))
}

#[tokio::test]
async fn stored_images_are_thumbnails_and_nothing_else_is_ever_inline() {
    let (gw, _operators) = gateway().await;
    let large: Vec<u8> = PNG
        .iter()
        .copied()
        .cycle()
        .take(5 * 1024 * 1024 + 1)
        .collect();
    let call = record_with(
        &gw,
        "conv-media",
        vec![
            Part::text("what are these?"),
            Part::image(PNG.to_vec(), "image/png"),
            Part::image(SVG.to_vec(), "image/svg+xml"),
            Part::file(
                b"<script>alert(3)</script>".to_vec(),
                "text/html",
                Some(HOSTILE_NAME.into()),
            ),
            Part::file(PDF.to_vec(), "application/pdf", Some("report.pdf".into())),
            Part::image(large.clone(), "image/png"),
        ],
    )
    .await;

    // Without a session: the login page, not the bytes.
    let (status, headers, body) = fetch(&media_url(&gw, &call, 1), &[]).await;
    assert_eq!(status, 303);
    assert_eq!(header(&headers, "location"), "/console/login");
    assert!(!body.windows(PNG.len()).any(|w| w == PNG));

    let cookie = console_login(&gw, OPS_KEY).await;
    let with_session = [("cookie", cookie.as_str())];
    let page: Answer = send(
        "GET",
        &gw.url("/console/conversation?id=conv-media"),
        &with_session,
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    let thumbnail = format!(
        "<img class=\"thumbnail\" src=\"/console/media?call={}&amp;message=0&amp;part=1\"",
        call.as_str()
    );
    assert!(page.body.contains(&thumbnail), "{}", page.body);
    assert_eq!(
        page.body.matches("<img").count(),
        1,
        "only the small raster image is inline: {}",
        page.body
    );
    // Documents by name and size, escaped; the large image is a link with its size.
    assert!(!page.body.contains("<script>alert(1)"), "{}", page.body);
    assert!(page
        .body
        .contains("&lt;script&gt;alert(1)&lt;/script&gt;.html"));
    assert!(page.body.contains(&format!(
        "file (application/pdf, {} bytes, report.pdf)",
        PDF.len()
    )));
    assert!(page
        .body
        .contains(&format!("image (image/png, {} bytes)</a>", large.len())));

    // The thumbnail's bytes, with their type, inline, unsniffable and unable to run anything.
    let (status, headers, body) = fetch(&media_url(&gw, &call, 1), &with_session).await;
    assert_eq!(status, 200);
    assert_eq!(&body[..], PNG);
    assert_eq!(header(&headers, "content-type"), "image/png");
    assert_eq!(header(&headers, "content-disposition"), "inline");
    assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
    assert_eq!(
        header(&headers, "content-security-policy"),
        "default-src 'none'; sandbox"
    );
    // The large image is served too (as its link asks), still inline: it is a raster image.
    let (status, _, body) = fetch(&media_url(&gw, &call, 5), &with_session).await;
    assert_eq!(status, 200);
    assert_eq!(body.len(), large.len());

    // SVG and HTML are attachments, whatever they claim; the file name in the header is cleaned.
    for (part, bytes) in [(2, SVG), (3, &b"<script>alert(3)</script>"[..])] {
        let (status, headers, body) = fetch(&media_url(&gw, &call, part), &with_session).await;
        assert_eq!(status, 200, "part {part}");
        assert_eq!(&body[..], bytes);
        let disposition = header(&headers, "content-disposition");
        assert!(
            disposition.starts_with("attachment"),
            "part {part}: {disposition}"
        );
        assert!(!disposition.contains('<'), "{disposition}");
        assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
        assert!(header(&headers, "content-security-policy").contains("sandbox"));
    }
    let (_, headers, body) = fetch(&media_url(&gw, &call, 4), &with_session).await;
    assert_eq!(&body[..], PDF);
    assert_eq!(header(&headers, "content-type"), "application/pdf");
    assert_eq!(
        header(&headers, "content-disposition"),
        "attachment; filename=\"report.pdf\""
    );

    // Only parts a record holds: a text part, a part or message past the end, an unknown call.
    for url in [
        media_url(&gw, &call, 0),
        media_url(&gw, &call, 6),
        gw.url(&format!(
            "/console/media?call={}&message=9&part=1",
            call.as_str()
        )),
        gw.url("/console/media?call=no-such-call&message=0&part=1"),
    ] {
        let (status, _, body) = fetch(&url, &with_session).await;
        assert_eq!(status, 404, "{url}");
        assert!(!body.windows(PNG.len()).any(|w| w == PNG));
    }
    // Another site's page cannot read it with the operator's cookie.
    let (status, _, _) = fetch(
        &media_url(&gw, &call, 1),
        &[
            ("cookie", cookie.as_str()),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "no-cors"),
        ],
    )
    .await;
    assert_eq!(status, 403);
}

/// The whole way: an image a client sends through Chat Completions is recorded (its bytes once, in the blob
/// table), and the console shows it as a thumbnail whose route answers with the very bytes the client sent.
#[tokio::test]
async fn an_image_sent_through_the_gateway_is_a_thumbnail_with_its_bytes() {
    let (gw, _operators) = gateway().await;
    let answer = gw
        .chat(&json!({
            "model": "gpt-test",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", base64(PNG))}},
            ]}],
        }))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let store = gw.records().await;
    let listed = store
        .list_conversations(&ConversationQuery::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let conversation = &listed[0].conversation_id;
    let calls = store.conversation_calls(conversation).await.unwrap();
    let Message::User { content } = &calls[0].request.messages[0] else {
        panic!("{:?}", calls[0].request.messages)
    };
    assert_eq!(content.parts()[1], Part::image(PNG.to_vec(), "image/png"));
    let blobs: i64 = store
        .run("count blobs", |conn| {
            conn.query_row("SELECT COUNT(*) FROM chat_blobs", [], |row| row.get(0))
        })
        .await
        .unwrap();
    assert_eq!(blobs, 1, "the image's bytes are a row of the blob table");

    let cookie = console_login(&gw, OPS_KEY).await;
    let with_session = [("cookie", cookie.as_str())];
    let page = send(
        "GET",
        &gw.url(&format!(
            "/console/conversation?id={}",
            conversation.as_str()
        )),
        &with_session,
        "",
    )
    .await;
    let marker = "<img class=\"thumbnail\" src=\"";
    let at = page.body.find(marker).expect("a thumbnail") + marker.len();
    let src = page.body[at..]
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let (status, headers, body) = fetch(&gw.url(&src), &with_session).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), "image/png");
    assert_eq!(&body[..], PNG);
}
