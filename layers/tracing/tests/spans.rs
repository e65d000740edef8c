//! The call span: name, attributes, lifetime, outcome, nesting.

mod support;

use std::future::{poll_fn, Future};

use futures_util::StreamExt;
use support::*;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_chat::{
    ChatError, ChatEvent, ChatRequest, ChatStream, ChatStreamExt, ConversationId, ErrorKind,
    FinishReason, Message, ModelInfo, ToolCall, ToolMessage,
};
use tower_chat_tracing::{Tracing, TracingLayer};
use tracing::Instrument;

fn request() -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user("hi")]).model("gpt-4o-mini");
    request.options.temperature = Some(0.7);
    request.options.top_p = Some(0.9);
    request.options.max_output_tokens = Some(100);
    request.with_extension(ConversationId::new("conv-42"))
}

fn answering(
    shape: Delivery,
) -> impl Service<ChatRequest, Response = ChatStream, Error = ChatError> + ModelInfo + Clone {
    Scripted {
        reply: move |_req: ChatRequest| async move { Ok(scripted_stream(shape, complete_answer())) },
        metadata: openai_metadata(),
    }
}

#[tokio::test]
async fn a_completed_call_has_the_genai_attributes_in_both_shapes() {
    for shape in SHAPES {
        let (capture, _guard) = Capture::install();
        let service = Tracing::new(answering(shape));
        let response = service
            .oneshot(request())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "Hello, world", "{shape:?}");

        let (_, span) = capture.only("chat");
        assert!(
            span.closed,
            "{shape:?}: the span closes at the end of the stream"
        );
        let expected = [
            ("otel.name", "chat gpt-4o-mini"),
            ("otel.kind", "client"),
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.model", "gpt-4o-mini"),
            ("gen_ai.request.temperature", "0.7"),
            ("gen_ai.request.top_p", "0.9"),
            ("gen_ai.request.max_tokens", "100"),
            ("gen_ai.conversation.id", "conv-42"),
            ("server.address", "api.openai.com"),
            ("server.port", "443"),
            ("gen_ai.response.id", "resp-1"),
            ("gen_ai.response.model", "gpt-4o-mini-2024-07-18"),
            ("gen_ai.response.finish_reasons", r#"["stop"]"#),
            ("gen_ai.usage.input_tokens", "10"),
            ("gen_ai.usage.output_tokens", "5"),
            ("tower_chat.outcome", "completed"),
        ];
        for (name, value) in expected {
            assert_eq!(
                span.field(name),
                Some(value),
                "{shape:?}: {name} in {span:#?}"
            );
        }
        for absent in [
            "gen_ai.output.type",
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "error.type",
            "otel.status_code",
            "gen_ai.input.messages",
            "gen_ai.output.messages",
        ] {
            assert_eq!(span.field(absent), None, "{shape:?}: {absent}");
        }
        let ttfc: f64 = span
            .field("gen_ai.response.time_to_first_chunk")
            .unwrap()
            .parse()
            .unwrap();
        assert!(ttfc >= 0.0);
    }
}

#[tokio::test]
async fn the_model_defaults_to_the_services_and_the_provider_can_be_named() {
    let (capture, _guard) = Capture::install();
    let service = Tracing::new(answering(Delivery::AllAtOnce));
    let stream = service
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    stream.collect_response().await.unwrap();
    let (_, span) = capture.only("chat");
    assert_eq!(span.field("otel.name"), Some("chat gpt-4o-mini"));
    assert_eq!(span.field("gen_ai.request.temperature"), None);

    // A service without ModelInfo and a request without a model.
    let (capture, _guard) = Capture::install();
    let leaf = service_fn(|_req: ChatRequest| async {
        Ok::<_, ChatError>(scripted_stream(Delivery::AllAtOnce, complete_answer()))
    });
    let service = TracingLayer::new().provider("anthropic").layer(leaf);
    let stream = service
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap();
    stream.collect_response().await.unwrap();
    let (_, span) = capture.only("chat");
    assert_eq!(span.field("otel.name"), Some("chat"));
    assert_eq!(span.field("gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(span.field("gen_ai.request.model"), None);
    assert_eq!(span.field("server.address"), None);
}

#[tokio::test]
async fn cached_tokens_and_the_output_type_are_recorded() {
    let (capture, _guard) = Capture::install();
    let leaf = service_fn(|_req: ChatRequest| async {
        let cached = ChatEvent::Usage {
            usage: tower_chat::Usage {
                from_response_cache: false,
                input_tokens: 100,
                output_tokens: 5,
                cached_input_tokens: Some(64),
                reasoning_tokens: None,
                cache_write_input_tokens: Some(16),
            },
        };
        Ok::<_, ChatError>(scripted_stream(
            Delivery::AllAtOnce,
            vec![
                Ok(ChatEvent::text("{}")),
                Ok(cached),
                Ok(ChatEvent::finish(FinishReason::Stop)),
            ],
        ))
    });
    let service = TracingLayer::new().provider("openai").layer(leaf);
    let mut request = request();
    request.options.response_format = Some(tower_chat::ResponseFormat::JsonObject);
    service
        .oneshot(request)
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    let (_, span) = capture.only("chat");
    assert_eq!(span.field("gen_ai.output.type"), Some("json"));
    assert_eq!(span.field("gen_ai.usage.input_tokens"), Some("100"));
    assert_eq!(
        span.field("gen_ai.usage.cache_read.input_tokens"),
        Some("64")
    );
    assert_eq!(
        span.field("gen_ai.usage.cache_creation.input_tokens"),
        Some("16")
    );
}

#[tokio::test]
async fn a_service_error_fails_the_span() {
    for shape in SHAPES {
        let (capture, _guard) = Capture::install();
        let leaf = service_fn(move |_req: ChatRequest| async move {
            if shape == Delivery::OneByOne {
                tokio::task::yield_now().await;
            }
            Err::<ChatStream, _>(
                ChatError::new(ErrorKind::RateLimited { retry_after: None }, "slow down")
                    .with_status(http::StatusCode::TOO_MANY_REQUESTS),
            )
        });
        let service = TracingLayer::new().provider("openai").layer(leaf);
        let error = service.oneshot(request()).await.err().unwrap();
        assert_eq!(error.kind().as_str(), "rate_limited");

        let (index, span) = capture.only("chat");
        assert!(span.closed, "{shape:?}");
        assert_eq!(span.field("tower_chat.outcome"), Some("failed"));
        assert_eq!(span.field("error.type"), Some("rate_limited"));
        assert_eq!(span.field("otel.status_code"), Some("ERROR"));
        assert_eq!(span.field("http.response.status_code"), Some("429"));
        assert_eq!(span.field("gen_ai.response.finish_reasons"), None);
        let failures: Vec<_> = capture
            .events()
            .into_iter()
            .filter(|e| e.fields.get("message").map(String::as_str) == Some("chat call failed"))
            .collect();
        assert_eq!(failures.len(), 1, "{shape:?}");
        assert_eq!(failures[0].parent, Some(index));
        assert_eq!(
            failures[0].fields.get("error.type").map(String::as_str),
            Some("rate_limited")
        );
    }
}

#[tokio::test]
async fn an_error_item_ends_the_span_at_once_and_keeps_the_partial_figures() {
    for shape in SHAPES {
        let (capture, _guard) = Capture::install();
        let leaf = service_fn(move |_req: ChatRequest| async move {
            Ok::<_, ChatError>(scripted_stream(
                shape,
                vec![
                    Ok(ChatEvent::text("Hel")),
                    Ok(usage(7, 1)),
                    Err(ChatError::new(ErrorKind::Connection, "connection reset")),
                ],
            ))
        });
        let service = TracingLayer::new().provider("openai").layer(leaf);
        let mut stream = service.oneshot(request()).await.unwrap();
        assert!(matches!(stream.next().await, Some(Ok(_))));
        assert!(matches!(stream.next().await, Some(Ok(_))));
        assert!(!capture.only("chat").1.closed, "{shape:?}: still streaming");
        assert!(matches!(stream.next().await, Some(Err(_))));
        // The stream is still held, yet the call is over.
        let (_, span) = capture.only("chat");
        assert!(span.closed, "{shape:?}");
        assert_eq!(span.field("tower_chat.outcome"), Some("failed"));
        assert_eq!(span.field("error.type"), Some("connection"));
        assert_eq!(span.field("gen_ai.usage.input_tokens"), Some("7"));
        assert!(stream.next().await.is_none());
        drop(stream);
        let (_, span) = capture.only("chat");
        assert_eq!(
            span.field("tower_chat.outcome"),
            Some("failed"),
            "ended once"
        );
    }
}

#[tokio::test]
async fn a_dropped_stream_cancels_the_span_when_dropped() {
    for shape in SHAPES {
        let (capture, _guard) = Capture::install();
        let service = Tracing::new(answering(shape));
        let mut stream = service.oneshot(request()).await.unwrap();
        stream.next().await.unwrap().unwrap();
        stream.next().await.unwrap().unwrap();
        assert!(!capture.only("chat").1.closed);
        drop(stream);
        let (_, span) = capture.only("chat");
        assert!(span.closed, "{shape:?}");
        assert_eq!(span.field("tower_chat.outcome"), Some("cancelled"));
        assert_eq!(span.field("error.type"), Some("cancelled"));
        assert_eq!(
            span.field("otel.status_code"),
            None,
            "a cancellation is not a failure"
        );
        assert_eq!(span.field("gen_ai.response.id"), Some("resp-1"));
    }
}

#[tokio::test]
async fn a_dropped_future_cancels_the_span() {
    let (capture, _guard) = Capture::install();
    let leaf = service_fn(|_req: ChatRequest| async {
        std::future::pending::<()>().await;
        Ok::<ChatStream, ChatError>(scripted_stream(Delivery::AllAtOnce, complete_answer()))
    });
    let mut service = TracingLayer::new().provider("openai").layer(leaf);
    let mut future = Box::pin(service.call(request()));
    // Poll once so the inner future is under way, then give up on it.
    let polled = poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending())).await;
    assert!(polled);
    assert!(!capture.only("chat").1.closed);
    drop(future);
    let (_, span) = capture.only("chat");
    assert!(span.closed);
    assert_eq!(span.field("tower_chat.outcome"), Some("cancelled"));
}

#[tokio::test]
async fn a_stream_dropped_right_after_its_finish_completed() {
    for shape in SHAPES {
        let (capture, _guard) = Capture::install();
        let service = Tracing::new(answering(shape));
        let mut stream = service.oneshot(request()).await.unwrap();
        while let Some(event) = stream.next().await {
            if matches!(event, Ok(ChatEvent::Finish { .. })) {
                break;
            }
        }
        drop(stream);
        let (_, span) = capture.only("chat");
        assert_eq!(
            span.field("tower_chat.outcome"),
            Some("completed"),
            "{shape:?}"
        );
        assert_eq!(span.field("error.type"), None);
    }
}

#[tokio::test]
async fn a_stream_dropped_in_the_round_after_a_finish_was_cancelled() {
    // A tool loop's stream: round one finishes with tool calls, round two is under way when the caller leaves.
    let (capture, _guard) = Capture::install();
    let leaf = service_fn(|_req: ChatRequest| async {
        Ok::<_, ChatError>(scripted_stream(
            Delivery::OneByOne,
            vec![
                Ok(ChatEvent::finish(FinishReason::ToolCalls)),
                Ok(ChatEvent::ToolResult {
                    result: ToolMessage::success("c1", "weather", "12C"),
                }),
                Ok(ChatEvent::text("It is")),
                Ok(ChatEvent::finish(FinishReason::Stop)),
            ],
        ))
    });
    let service = TracingLayer::new().provider("openai").layer(leaf);
    let mut stream = service.oneshot(request()).await.unwrap();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
    drop(stream);
    let (_, span) = capture.only("chat");
    assert_eq!(span.field("tower_chat.outcome"), Some("cancelled"));
    assert_eq!(
        span.field("gen_ai.response.finish_reasons"),
        Some(r#"["tool_calls"]"#)
    );
}

#[tokio::test]
async fn a_stream_ending_without_finish_is_incomplete_and_a_cancelled_error_is_a_cancellation() {
    let cases = [
        (vec![Ok(ChatEvent::text("Hel"))], "failed", "incomplete"),
        (
            vec![Ok(ChatEvent::text("Hel")), Err(ChatError::cancelled())],
            "cancelled",
            "cancelled",
        ),
    ];
    for (events, outcome, error_type) in cases {
        let (capture, _guard) = Capture::install();
        let leaf = service_fn(move |_req: ChatRequest| {
            let events = events.iter().map(|e| match e {
                Ok(event) => Ok(event.clone()),
                Err(_) => Err(ChatError::cancelled()),
            });
            let events: Vec<_> = events.collect();
            async move { Ok::<_, ChatError>(scripted_stream(Delivery::OneByOne, events)) }
        });
        let service = TracingLayer::new().provider("openai").layer(leaf);
        let stream = service.oneshot(request()).await.unwrap();
        let _ = stream.collect::<Vec<_>>().await;
        let (_, span) = capture.only("chat");
        assert!(span.closed);
        assert_eq!(span.field("tower_chat.outcome"), Some(outcome));
        assert_eq!(span.field("error.type"), Some(error_type));
    }
}

/// What a tool loop does while its stream is polled: run a tool inside an `execute_tool` span, log from inside it,
/// and yield the result.
fn tool_loop_stream() -> ChatStream {
    Box::pin(futures_util::stream::unfold(0, |step| async move {
        match step {
            0 => Some((
                Ok(ChatEvent::ToolCallEnd {
                    index: 0,
                    call: ToolCall::new("c1", "weather", serde_json::json!({"city": "Oslo"})),
                }),
                1,
            )),
            1 => {
                let span = tracing::info_span!(
                    "execute_tool",
                    otel.name = "execute_tool weather",
                    gen_ai.tool.name = "weather",
                    gen_ai.tool.call.id = "c1",
                );
                let result = async {
                    tokio::task::yield_now().await;
                    tracing::info!("tool ran");
                    ToolMessage::success("c1", "weather", "12C")
                }
                .instrument(span)
                .await;
                Some((Ok(ChatEvent::ToolResult { result }), 2))
            }
            2 => {
                tracing::info!("round two");
                Some((Ok(ChatEvent::finish(FinishReason::Stop)), 3))
            }
            _ => None,
        }
    }))
}

#[tokio::test]
async fn work_done_while_the_stream_is_polled_nests_under_the_call_span() {
    let (capture, _guard) = Capture::install();
    let leaf = service_fn(|_req: ChatRequest| {
        // Created synchronously in `call`.
        let connect = tracing::info_span!("connect");
        async move {
            async { tokio::task::yield_now().await }
                .instrument(connect)
                .await;
            Ok::<_, ChatError>(tool_loop_stream())
        }
    });
    let service = TracingLayer::new().provider("openai").layer(leaf);
    let outer = tracing::info_span!("request");
    async {
        let stream = service.oneshot(request()).await.unwrap();
        stream.collect_response().await.unwrap();
    }
    .instrument(outer)
    .await;

    let (request_index, _) = capture.only("request");
    let (chat_index, chat) = capture.only("chat");
    assert_eq!(
        chat.parent,
        Some(request_index),
        "the call span is a child of the caller's span"
    );
    let (_, connect) = capture.only("connect");
    assert_eq!(connect.parent, Some(chat_index));
    let (tool_index, tool) = capture.only("execute_tool");
    assert_eq!(tool.parent, Some(chat_index));
    assert_eq!(tool.field("gen_ai.tool.name"), Some("weather"));
    assert!(tool.closed);
    let events = capture.events();
    let ran = events
        .iter()
        .find(|e| e.fields["message"] == "tool ran")
        .unwrap();
    assert_eq!(ran.parent, Some(tool_index));
    let round_two = events
        .iter()
        .find(|e| e.fields["message"] == "round two")
        .unwrap();
    assert_eq!(round_two.parent, Some(chat_index));
}

#[tokio::test]
async fn inside_a_tool_loop_each_round_gets_its_own_span_beside_the_tool_spans() {
    let (capture, _guard) = Capture::install();
    let mut round = 0;
    let leaf = Scripted {
        reply: move |_req: ChatRequest| {
            round += 1;
            let events = if round == 1 {
                vec![
                    Ok(ChatEvent::ToolCallEnd {
                        index: 0,
                        call: ToolCall::new("c1", "weather", serde_json::json!({})),
                    }),
                    Ok(usage(10, 3)),
                    Ok(ChatEvent::finish(FinishReason::ToolCalls)),
                ]
            } else {
                vec![
                    Ok(ChatEvent::text("12C")),
                    Ok(usage(20, 4)),
                    Ok(ChatEvent::finish(FinishReason::Stop)),
                ]
            };
            async move { Ok(scripted_stream(Delivery::OneByOne, events)) }
        },
        metadata: openai_metadata(),
    };
    let mut rounds = Tracing::new(leaf);
    // A minimal tool loop around the traced service.
    async {
        for round in 0..2 {
            let stream = rounds.ready().await.unwrap().call(request()).await.unwrap();
            stream.collect_response().await.unwrap();
            if round == 0 {
                let span = tracing::info_span!("execute_tool", gen_ai.tool.name = "weather");
                async { tokio::task::yield_now().await }
                    .instrument(span)
                    .await;
            }
        }
    }
    .instrument(tracing::info_span!("turn"))
    .await;

    let (turn, _) = capture.only("turn");
    let chats = capture.named("chat");
    assert_eq!(chats.len(), 2);
    let (_, tool) = capture.only("execute_tool");
    assert_eq!(tool.parent, Some(turn));
    for (_, chat) in &chats {
        assert_eq!(chat.parent, Some(turn));
        assert!(chat.closed);
    }
    assert_eq!(
        chats[0].1.field("gen_ai.response.finish_reasons"),
        Some(r#"["tool_calls"]"#)
    );
    assert_eq!(chats[0].1.field("gen_ai.usage.input_tokens"), Some("10"));
    assert_eq!(
        chats[1].1.field("gen_ai.response.finish_reasons"),
        Some(r#"["stop"]"#)
    );
    assert_eq!(chats[1].1.field("gen_ai.usage.output_tokens"), Some("4"));
}

#[tokio::test]
async fn the_span_level_is_configurable_and_a_disabled_span_still_works() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer as _;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(
        capture
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    for (level, recorded) in [(tracing::Level::DEBUG, false), (tracing::Level::WARN, true)] {
        let service = TracingLayer::new()
            .level(level)
            .record_content(true)
            .layer(answering(Delivery::OneByOne));
        let response = service
            .oneshot(request())
            .await
            .unwrap()
            .collect_response()
            .await
            .unwrap();
        assert_eq!(response.text(), "Hello, world");
        assert_eq!(
            capture.named("chat").len(),
            usize::from(recorded),
            "{level}"
        );
    }
}

#[test]
fn the_service_forwards_model_info_and_exposes_the_inner_service() {
    let mut service = TracingLayer::new()
        .record_content(true)
        .layer(answering(Delivery::AllAtOnce));
    assert_eq!(service.model_metadata(), openai_metadata());
    assert_eq!(service.get_ref().model_metadata().provider, "openai");
    assert_eq!(service.get_mut().model_metadata().provider, "openai");
    assert_eq!(
        service.clone().into_inner().model_metadata(),
        openai_metadata()
    );

    fn assert_send<T: Send + 'static>(_: &T) {}
    let leaf = service_fn(|_req: ChatRequest| async {
        Ok::<_, ChatError>(scripted_stream(Delivery::AllAtOnce, complete_answer()))
    });
    let mut sendable = TracingLayer::new().provider("openai").layer(leaf);
    assert_send(&sendable.call(request()));
    let layer = TracingLayer::new().provider("openai");
    assert!(format!("{layer:?}").contains("openai"));
}
