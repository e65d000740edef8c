//! Any chunking of an answer gives the same verdicts, the same delivered text and the same finish as the whole
//! answer in one delta.

use futures_util::stream;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tower::{service_fn, Layer, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, FinishReason, GuardrailAudit,
    GuardrailVerdict, Message,
};
use tower_chat_guardrail::{Check, GuardrailLayer};

fn policy() -> GuardrailLayer {
    GuardrailLayer::new()
        .check(Check::secrets())
        .check(Check::personal_data())
        .check(
            Check::deny_list("topics", ["project zeus", "red team"])
                .unwrap()
                .flag(),
        )
        .check(
            Check::pattern("ticket", r"TCK-[0-9]{4,8}")
                .unwrap()
                .redact(),
        )
}

/// The answer of a model that streams `chunks`, as the layer delivers it: text, finish, verdicts.
async fn deliver(
    layer: &GuardrailLayer,
    chunks: Vec<String>,
) -> (String, Option<FinishReason>, Vec<GuardrailVerdict>) {
    let model = service_fn(move |_request: ChatRequest| {
        let mut events: Vec<Result<ChatEvent, ChatError>> = chunks
            .iter()
            .cloned()
            .map(|c| Ok(ChatEvent::text(c)))
            .collect();
        events.push(Ok(ChatEvent::finish(FinishReason::Stop)));
        async move { Ok::<ChatStream, ChatError>(Box::pin(stream::iter(events))) }
    });
    let audit = GuardrailAudit::new();
    let request = ChatRequest::new(vec![Message::user("hi")]).with_extension(audit.clone());
    let response = layer
        .layer(model)
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    (
        response.text().to_owned(),
        response.finish_reason,
        audit.verdicts(),
    )
}

/// Cut `text` at these byte offsets (moved back to character boundaries).
fn cut(text: &str, mut cuts: Vec<usize>) -> Vec<String> {
    cuts.iter_mut().for_each(|at| {
        *at %= text.len() + 1;
        while !text.is_char_boundary(*at) {
            *at -= 1;
        }
    });
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut from = 0;
    for at in cuts {
        pieces.push(text[from..at].to_owned());
        from = at;
    }
    pieces.push(text[from..].to_owned());
    pieces
}

const FRAGMENTS: &[&str] = &[
    "hello ",
    "world. ",
    "mail jane.doe@example.co.uk ",
    "or a@b.io",
    " call +44 20 7946 0958 ",
    "card 4111 1111 1111 1111 ",
    "card 4111 1111 1111 1112 ",
    "GB82 WEST 1234 5698 7654 32 ",
    "about Project  Zeus ",
    "project zeus! ",
    "red team ",
    "TCK-12345 ",
    "key sk-proj-ABCDEFGHIJKLMNOPQRSTUV123 ",
    "AKIAIOSFODNN7EXAMPLE",
    "-----BEGIN RSA PRIVATE KEY-----",
    "żółć ",
    "日本語 ",
    "\n",
    "sk-",
    "ant-",
    "@",
    "4111",
];

#[test]
fn any_chunking_gives_the_verdicts_and_text_of_the_whole() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let layer = policy();
    let strategy = (
        proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..14),
        proptest::collection::vec(any::<usize>(), 0..24),
    );
    let mut runner = TestRunner::new(Config {
        cases: 400,
        ..Config::default()
    });
    runner
        .run(&strategy, |(fragments, cuts)| {
            let text: String = fragments.concat();
            let whole = runtime.block_on(deliver(&layer, vec![text.clone()]));
            let pieces = runtime.block_on(deliver(&layer, cut(&text, cuts.clone())));
            prop_assert_eq!(&pieces, &whole, "text {:?} cut at {:?}", text, cuts);
            // Byte by byte (at character boundaries) too: the hardest chunking.
            let bytes: Vec<usize> = (0..=text.len()).collect();
            let single = runtime.block_on(deliver(&layer, cut(&text, bytes)));
            prop_assert_eq!(&single, &whole, "text {:?} byte by byte", text);
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_match_split_across_chunks_is_caught_and_never_delivered() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let layer = policy();
    let (text, finish, verdicts) = runtime.block_on(deliver(
        &layer,
        vec![
            "Reach me at ja".into(),
            "ne@exam".into(),
            "ple.com. The key: sk-pr".into(),
            "oj-ABCDEFGHIJKLMN".into(),
            "OPQRSTUV123 and more".into(),
        ],
    ));
    assert_eq!(
        text,
        "Reach me at [REDACTED:email]. The key: \n\n\
         [The rest of this answer was withheld by the content policy (check `secrets`).]"
    );
    assert_eq!(finish, Some(FinishReason::ContentFilter));
    let summary: Vec<(&str, &str, Option<&str>, usize, usize)> = verdicts
        .iter()
        .map(|v| {
            let span = v.span.unwrap();
            (
                v.check.as_str(),
                v.action.as_str(),
                v.detail.as_deref(),
                span.start,
                span.end,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("personal_data", "redact", Some("email"), 12, 28),
            ("secrets", "block", Some("openai_key"), 39, 72),
        ]
    );
}
