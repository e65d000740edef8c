//! Tool sets: per-request tools, the duplicate rule, the registry, and what a body sees in its context.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::{ConversationId, ErrorKind, FinishReason, ModelInfo, ModelMetadata};
use tower_chat_function_invocation::{
    tool_fn, tool_json, FunctionInvocationLayer, RequestTools, ToolContext, ToolSet,
};

fn named(
    name: &str,
    result: &'static str,
    guarded: bool,
) -> tower_chat_function_invocation::CompiledTool {
    let tool = tool_json(
        name,
        "",
        json!({"type": "object"}),
        move |_v: Value, _c| async move { Ok::<_, String>(result) },
    );
    if guarded { tool.with_approval() } else { tool }
        .compile()
        .unwrap()
}

#[tokio::test]
async fn request_tools_extend_the_layer_and_a_guard_is_never_dropped() {
    for shape in SHAPES {
        let cases = [
            // (layer tool guarded, request tool guarded, expected outcome)
            (false, false, Some("from request")),
            (false, true, None),
            (true, false, None),
        ];
        for (layer_guard, request_guard, expected) in cases {
            let (inner, _) = scripted(shape, vec![calls(&[("a", "x", json!({}))]), answer("ok")]);
            let layer = FunctionInvocationLayer::new()
                .tool(named("x", "from layer", layer_guard))
                .unwrap();
            let request = user("go").with_extension(
                RequestTools::new()
                    .tool(named("x", "from request", request_guard))
                    .unwrap(),
            );
            let (events, _) = run(stack(layer, inner), request).await;
            match expected {
                Some(text) => assert_eq!(tool_results(&events)[0].content, text),
                None => assert_eq!(
                    finish_reasons(&events),
                    vec![FinishReason::AwaitingApproval],
                    "{layer_guard} {request_guard}"
                ),
            }
        }

        // A request-only tool is offered alongside the layer's.
        let (inner, script) = scripted(shape, vec![answer("ok")]);
        let layer = FunctionInvocationLayer::new()
            .tool(named("x", "", false))
            .unwrap();
        let request =
            user("go").with_extension(RequestTools::new().tool(named("y", "", false)).unwrap());
        run(stack(layer, inner), request).await;
        assert_eq!(script.offered(0), ["x", "y"]);
    }
}

#[tokio::test]
async fn registered_tools_are_offered_by_name_and_unknown_names_fail_first() {
    for shape in SHAPES {
        let runs = counter();
        let registry = ToolSet::new()
            .with(weather(runs.clone()))
            .and_then(|set| set.with(named("other", "", false)))
            .unwrap();
        let layer = FunctionInvocationLayer::new().registry(registry);
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[("a", "weather", json!({"city": "Oslo"}))]),
                answer("ok"),
            ],
        );
        let request = user("go").with_extension(RequestTools::new().registered("weather"));
        let (events, error) = run(stack(layer.clone(), inner), request).await;
        assert!(error.is_none());
        assert_eq!(count(&runs), 1);
        assert_eq!(tool_results(&events).len(), 1);
        assert_eq!(
            script.offered(0),
            ["weather"],
            "only named registry tools are offered"
        );

        let (inner, script) = scripted(shape, vec![]);
        let request = user("go").with_extension(RequestTools::new().registered("nope"));
        let error = stack(layer, inner).oneshot(request).await.err().unwrap();
        assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
        assert!(
            error
                .message()
                .contains("`nope` is not in the tool registry"),
            "{error}"
        );
        assert_eq!(script.calls(), 0);
    }
    let (inner, _) = scripted(Delivery::AllAtOnce, vec![]);
    let request = user("go").with_extension(RequestTools::new().registered("weather"));
    let error = stack(FunctionInvocationLayer::new(), inner)
        .oneshot(request)
        .await
        .err()
        .unwrap();
    assert!(error.message().contains("no tool registry"), "{error}");
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    /// What to remember.
    text: String,
}

#[tokio::test]
async fn a_typed_tool_gets_its_arguments_and_context() {
    for shape in SHAPES {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let remember = tool_fn(
            "remember",
            "Stores a note",
            move |note: Note, ctx: ToolContext| {
                let record = record.clone();
                async move {
                    let conversation = ctx.extensions().get::<ConversationId>().cloned();
                    record.lock().unwrap().push((
                        note.text.clone(),
                        ctx.call_id().to_owned(),
                        ctx.tool_name().to_owned(),
                        ctx.round(),
                        conversation,
                        ctx.cancellation().is_cancelled(),
                    ));
                    Ok::<_, String>(json!({"stored": note.text}))
                }
            },
        )
        .compile()
        .unwrap();
        let (inner, script) = scripted(
            shape,
            vec![
                calls(&[("a", "remember", json!({"text": "milk"}))]),
                calls(&[("b", "remember", json!({"text": "eggs"}))]),
                answer("ok"),
            ],
        );
        let request = user("go").with_extension(ConversationId::new("conv-9"));
        let layer = FunctionInvocationLayer::new().tool(remember).unwrap();
        let (_, error) = run(stack(layer, inner), request).await;
        assert!(error.is_none());
        let seen = seen.lock().unwrap().clone();
        let conv = Some(ConversationId::new("conv-9"));
        assert_eq!(
            seen,
            vec![
                (
                    "milk".into(),
                    "a".into(),
                    "remember".into(),
                    0,
                    conv.clone(),
                    false
                ),
                ("eggs".into(), "b".into(), "remember".into(), 1, conv, false),
            ]
        );
        assert_eq!(
            tool_messages(&script.sent(2))[1].content,
            r#"{"stored":"eggs"}"#
        );
        let schema = &script.requests()[0].options.tools[0].parameters;
        assert_eq!(
            schema["properties"]["text"]["description"],
            "What to remember."
        );
    }
}

#[derive(Clone)]
struct Described;

impl ModelInfo for Described {
    fn model_metadata(&self) -> ModelMetadata {
        ModelMetadata {
            provider: "scripted".into(),
            model_id: Some("m-1".into()),
            endpoint: None,
            supports_tools: true,
            supports_parallel_tool_calls: true,
            supports_streaming_usage: true,
            context_window: None,
        }
    }
}

#[test]
fn model_metadata_and_the_inner_service_are_reachable_through_the_layer() {
    let mut service = tower::Layer::layer(&FunctionInvocationLayer::new(), Described);
    assert_eq!(service.model_metadata().model_id.as_deref(), Some("m-1"));
    let _: &Described = service.get_ref();
    let _: &mut Described = service.get_mut();
    let _: Described = service.into_inner();
    let debug = format!(
        "{:?}",
        FunctionInvocationLayer::new()
            .tool(named("x", "", false))
            .unwrap()
            .max_rounds(4)
    );
    assert!(
        debug.contains("max_rounds: 4") && debug.contains("[\"x\"]"),
        "{debug}"
    );
}
