//! Failures: error results, detail level, panics, timeouts, the error policy, consecutive failures, bad
//! arguments, unknown and client-side tools.

mod common;

use std::time::Duration;

use futures_util::StreamExt;
use tower::ServiceExt;

use common::*;
use serde_json::{json, Value};
use tower_chat::{
    ChatError, ChatEvent, ErrorKind, FinishReason, Message, ToolArguments, ToolCall, ToolSpec,
};
use tower_chat_function_invocation::{
    tool_json, ErrorDetail, ErrorPolicy, FunctionInvocationLayer, ToolContext, ToolError,
    ToolFailureKind, UnknownToolPolicy,
};

#[tokio::test]
async fn a_failing_tool_becomes_an_error_result_and_the_loop_goes_on() {
    for shape in SHAPES {
        for (detail, expected) in [
            (ErrorDetail::Full, "error: database unreachable"),
            (ErrorDetail::Brief, "error: the tool failed"),
        ] {
            let runs = counter();
            let (inner, script) = scripted(
                shape,
                vec![calls(&[("a", "db", json!({}))]), answer("sorry")],
            );
            let layer = FunctionInvocationLayer::new()
                .tool(counting("db", runs.clone(), Err("database unreachable")))
                .unwrap()
                .error_detail(detail);
            let (events, error) = run(stack(layer, inner), user("x")).await;
            assert!(error.is_none());
            assert_eq!(count(&runs), 1);
            assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);
            let sent = tool_messages(&script.sent(1));
            assert_eq!(sent.len(), 1);
            assert!(sent[0].is_error, "{shape:?}");
            assert_eq!(sent[0].content, expected, "{shape:?}");
            assert_eq!(tool_results(&events), sent);
        }
    }
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_result() {
    for shape in SHAPES {
        let boom = tool_json(
            "boom",
            "",
            json!({"type": "object"}),
            |_v: Value, _c| async {
                if true {
                    panic!("index out of range");
                }
                Ok::<_, String>("never")
            },
        )
        .compile()
        .unwrap();
        let (inner, script) = scripted(
            shape,
            vec![calls(&[("a", "boom", json!({}))]), answer("hm")],
        );
        let layer = FunctionInvocationLayer::new().tool(boom).unwrap();
        let (_, error) = run(stack(layer, inner), user("x")).await;
        assert!(error.is_none());
        let sent = tool_messages(&script.sent(1));
        assert!(sent[0].is_error);
        assert_eq!(
            sent[0].content,
            "error: the tool panicked: index out of range"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_past_its_timeout_is_an_error_result() {
    for shape in SHAPES {
        let runs = counter();
        let seen = runs.clone();
        let told = counter();
        let tell = told.clone();
        let slow = tool_json(
            "slow",
            "",
            json!({"type": "object"}),
            move |_v: Value, ctx: ToolContext| {
                let seen = seen.clone();
                let tell = tell.clone();
                let token = ctx.cancellation().clone();
                tokio::spawn(async move {
                    token.cancelled().await;
                    tell.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
                async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, String>("late")
                }
            },
        )
        .compile()
        .unwrap();
        let fast_override = tool_json(
            "quick",
            "",
            json!({"type": "object"}),
            |_v: Value, _c| async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<_, String>("in time")
            },
        )
        .with_timeout(Duration::from_secs(5))
        .compile()
        .unwrap();
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[("a", "slow", json!({})), ("b", "quick", json!({}))]),
                answer("ok"),
            ],
        );
        let layer = FunctionInvocationLayer::new()
            .tool(slow)
            .unwrap()
            .tool(fast_override)
            .unwrap()
            .tool_timeout(Duration::from_secs(1));
        let mut stream = stack(layer, inner).oneshot(user("x")).await.unwrap();
        let mut told_at_result = None;
        while let Some(item) = stream.next().await {
            if let ChatEvent::ToolResult { result } = item.unwrap() {
                if result.call_id == "a" {
                    // While the stream is still alive: the timed-out call's own token was cancelled.
                    tokio::task::yield_now().await;
                    told_at_result = Some(count(&told));
                }
            }
        }
        assert_eq!(told_at_result, Some(1), "{shape:?}");
        assert_eq!(count(&runs), 0, "the timed-out body was dropped");
        let sent = tool_messages(&script.sent(1));
        assert!(sent[0].is_error);
        assert_eq!(sent[0].content, "error: the tool did not finish within 1s");
        assert_eq!(sent[1].content, "in time", "a tool's own timeout wins");
    }
}

#[tokio::test]
async fn the_error_policy_can_end_the_stream_with_a_typed_error() {
    for shape in SHAPES {
        let (inner, script) = scripted(
            shape,
            vec![calls(&[("a", "ok", json!({})), ("b", "db", json!({}))])],
        );
        let policy = ErrorPolicy::new(|failure| {
            assert_eq!(failure.kind, ToolFailureKind::Failed);
            assert_eq!(failure.call.id, "b");
            Some(ChatError::new(
                ErrorKind::Tool,
                format!("fatal: {}", failure.message),
            ))
        });
        let layer = FunctionInvocationLayer::new()
            .tool(counting("ok", counter(), Ok("fine")))
            .unwrap()
            .tool(counting("db", counter(), Err("disk full")))
            .unwrap()
            .error_policy(policy);
        let (events, error) = run(stack(layer, inner), user("x")).await;
        let error = error.expect("the policy ends the stream");
        assert_eq!(error.kind(), &ErrorKind::Tool);
        assert_eq!(error.message(), "fatal: disk full");
        assert_eq!(
            tool_results(&events).len(),
            1,
            "only the successful result was emitted"
        );
        assert_eq!(script.calls(), 1, "{shape:?}");
    }
}

#[tokio::test]
async fn consecutive_failing_rounds_end_the_stream_and_a_good_round_resets_the_count() {
    for shape in SHAPES {
        let fail = |id: &str| calls(&[(id, "db", json!({}))]);
        let ok = |id: &str| calls(&[(id, "ok", json!({}))]);
        // fail, ok, fail, fail: with a limit of 2 the fourth round ends the stream.
        let (inner, script) = scripted(shape, vec![fail("a"), ok("b"), fail("c"), fail("d")]);
        let layer = FunctionInvocationLayer::new()
            .tool(counting("ok", counter(), Ok("fine")))
            .unwrap()
            .tool(counting("db", counter(), Err("disk full")))
            .unwrap()
            .max_consecutive_failures(2);
        let (events, error) = run(stack(layer, inner), user("x")).await;
        let error = error.expect("too many failures");
        assert_eq!(error.kind(), &ErrorKind::Tool);
        assert!(
            error.message().contains("2 tool rounds in a row"),
            "{error}"
        );
        assert!(error.message().contains("disk full"), "{error}");
        assert_eq!(script.calls(), 4, "{shape:?}");
        assert_eq!(tool_results(&events).len(), 4);
        assert!(finish_reasons(&events).is_empty());
    }
    // The default is 3.
    let fail = |id: &str| calls(&[(id, "db", json!({}))]);
    let (inner, script) = scripted(Delivery::AllAtOnce, vec![fail("a"), fail("b"), fail("c")]);
    let layer = FunctionInvocationLayer::new()
        .tool(counting("db", counter(), Err("x")))
        .unwrap();
    let (_, error) = run(stack(layer, inner), user("x")).await;
    assert_eq!(error.unwrap().kind(), &ErrorKind::Tool);
    assert_eq!(script.calls(), 3);
}

#[tokio::test]
async fn bad_arguments_never_reach_the_body_and_the_model_is_told_what_is_wrong() {
    for shape in SHAPES {
        let runs = counter();
        let mut first = calls(&[("a", "weather", json!({"city": 7, "extra": true}))]);
        // The second call's argument text was not JSON at all.
        first.insert(
            first.len() - 2,
            ChatEvent::ToolCallEnd {
                index: 1,
                call: ToolCall::from_raw_arguments(
                    "b".into(),
                    "weather".into(),
                    "{\"city\":".into(),
                ),
            },
        );
        let (inner, script) = scripted(shape, vec![first, answer("retrying")]);
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap();
        let (_, error) = run(stack(layer, inner), user("x")).await;
        assert!(error.is_none());
        assert_eq!(count(&runs), 0, "{shape:?}");
        let sent = tool_messages(&script.sent(1));
        assert!(sent.iter().all(|m| m.is_error));
        assert!(
            sent[0]
                .content
                .to_string()
                .contains("\n- at /city: expected string, found integer 7"),
            "{}",
            sent[0].content
        );
        assert!(
            sent[0]
                .content
                .to_string()
                .contains("\n- at /: property \"extra\" is not allowed"),
            "{}",
            sent[0].content
        );
        assert!(
            sent[1].content.to_string().contains("not valid JSON"),
            "{}",
            sent[1].content
        );
        match &script.sent(1)[1] {
            Message::Assistant(a) => assert!(matches!(
                a.tool_calls[1].arguments,
                ToolArguments::Invalid { .. }
            )),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_body_can_reject_arguments_in_full_detail() {
    let strict = tool_json(
        "date",
        "",
        json!({"type": "object"}),
        |_v: Value, _c: ToolContext| async {
            Err::<String, _>(ToolError::invalid_arguments("the date is in the past"))
        },
    )
    .compile()
    .unwrap();
    let (inner, script) = scripted(
        Delivery::AllAtOnce,
        vec![calls(&[("a", "date", json!({}))]), answer("x")],
    );
    let layer = FunctionInvocationLayer::new()
        .tool(strict)
        .unwrap()
        .error_detail(ErrorDetail::Brief);
    run(stack(layer, inner), user("x")).await;
    assert_eq!(
        tool_messages(&script.sent(1))[0].content,
        "error: invalid arguments for tool `date`: the date is in the past"
    );
}

#[tokio::test]
async fn unknown_tools_get_an_error_result_or_are_handed_back() {
    for shape in SHAPES {
        let runs = counter();
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[
                    ("a", "wether", json!({})),
                    ("b", "weather", json!({"city": "Oslo"})),
                ]),
                answer("ok"),
            ],
        );
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap();
        let (events, _) = run(stack(layer.clone(), inner), user("x")).await;
        assert_eq!(finish_reasons(&events), vec![FinishReason::Stop]);
        let sent = tool_messages(&script.sent(1));
        assert_eq!(
            sent[0].content,
            "error: unknown tool `wether`; available tools: weather"
        );
        assert!(!sent[1].is_error);

        let (inner, script) = scripted(
            shape,
            vec![calls(&[
                ("a", "wether", json!({})),
                ("b", "weather", json!({"city": "Oslo"})),
            ])],
        );
        let layer = layer.unknown_tool(UnknownToolPolicy::HandBack);
        let (events, error) = run(stack(layer, inner), user("x")).await;
        assert!(error.is_none());
        assert_eq!(script.calls(), 1, "{shape:?}");
        assert_eq!(finish_reasons(&events), vec![FinishReason::ToolCalls]);
        assert_eq!(tool_results(&events).len(), 1, "the known call ran");
        assert_eq!(count(&runs), 2);
    }
}

#[tokio::test]
async fn client_side_tools_are_handed_back_after_the_executable_calls_ran() {
    for shape in SHAPES {
        let runs = counter();
        let (inner, script) = scripted(
            shape,
            vec![calls(&[
                ("a", "pick_file", json!({})),
                ("b", "weather", json!({"city": "Oslo"})),
            ])],
        );
        let layer = FunctionInvocationLayer::new()
            .tool(weather(runs.clone()))
            .unwrap();
        let request = user("x").tool(ToolSpec::new(
            "pick_file",
            "Ask the user for a file",
            json!({"type": "object"}),
        ));
        let (events, error) = run(stack(layer, inner), request).await;
        assert!(error.is_none());
        assert_eq!(count(&runs), 1);
        assert_eq!(script.calls(), 1);
        assert_eq!(script.offered(0), ["weather", "pick_file"]);
        assert_eq!(finish_reasons(&events), vec![FinishReason::ToolCalls]);
        let results = tool_results(&events);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].call_id, "b");
        // What the caller collects lets it continue: both calls, the executed result; it adds its own.
        let mut builder = tower_chat::ResponseBuilder::new();
        events.iter().for_each(|e| builder.push(e));
        let response = builder.finish();
        assert_eq!(response.last_assistant().unwrap().tool_calls.len(), 2);
        assert_eq!(tool_messages(&response.messages).len(), 1);
    }
}
