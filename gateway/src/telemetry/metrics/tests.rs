use super::*;

#[test]
fn label_values_are_escaped() {
    let metrics = PrometheusMetrics::new();
    metrics
        .replace_upstream_connections(vec![("a\"b\\c\nd".to_owned(), StaleConnections::default())]);
    let scrape = metrics.render();
    assert!(
        scrape.contains(
            "tower_chat_upstream_stale_connections_total{target=\"a\\\"b\\\\c\\nd\"} 0\n"
        ),
        "{scrape}"
    );
}

#[test]
fn only_plain_short_names_become_label_values() {
    let mut c = ModelLabelPolicy::default();
    let model = |c: &mut ModelLabelPolicy, name: &str| c.labels("openai", name).model.0.to_string();
    assert_eq!(model(&mut c, "gpt-4o-mini"), "gpt-4o-mini");
    assert_eq!(
        model(&mut c, "org/model:tag@v1.5+x"),
        "org/model:tag@v1.5+x"
    );
    for refused in [
        "",
        "other",
        "with space",
        "quote\"",
        "line\nbreak",
        "é",
        &"m".repeat(MAX_LABEL_BYTES + 1),
    ] {
        assert_eq!(model(&mut c, refused), OTHER, "{refused:?}");
    }
    assert_eq!(
        model(&mut c, &"m".repeat(MAX_LABEL_BYTES)).len(),
        MAX_LABEL_BYTES
    );
    c.configured = Some([Label::new("smart")].into_iter().collect());
    assert_eq!(model(&mut c, "smart"), "smart");
    assert_eq!(model(&mut c, "gpt-4o-mini"), OTHER, "configured names only");
}

/// Every series a name can have, recorded by the tracing layer as the gateway's stack does: a completed
/// streamed call (both histograms, tokens) and a failed call of each error kind.
async fn record_every_series(metrics: &PrometheusMetrics, provider: &'static str, model: &str) {
    use tower::{Layer, ServiceExt};
    use tower_chat::{ChatError, ChatEvent, ChatRequest, ChatStreamExt, ErrorKind, FinishReason};
    let failures = [
        ErrorKind::InvalidRequest,
        ErrorKind::Authentication,
        ErrorKind::Upstream,
        ErrorKind::Connection,
        ErrorKind::Protocol,
        ErrorKind::Cancelled,
        ErrorKind::Tool,
        ErrorKind::Other,
    ];
    for failure in std::iter::once(None).chain(failures.into_iter().map(Some)) {
        let service = tower::service_fn(move |_: ChatRequest| {
            let failure = failure.clone();
            async move {
                match failure {
                    Some(kind) => Err(ChatError::new(kind, "scripted")),
                    None => Ok(tower_chat::test_server::scripted_stream(
                        tower_chat::test_server::Delivery::AllAtOnce,
                        vec![
                            Ok(ChatEvent::TextDelta { text: "hi".into() }),
                            Ok(ChatEvent::Usage {
                                usage: tower_chat::Usage {
                                    input_tokens: 3,
                                    output_tokens: 4,
                                    ..Default::default()
                                },
                            }),
                            Ok(ChatEvent::Finish {
                                reason: FinishReason::Stop,
                            }),
                        ],
                    )),
                }
            }
        });
        let stack = tower_chat_tracing::TracingLayer::new()
            .provider(provider)
            .metrics(metrics.clone())
            .layer(service);
        let mut request = ChatRequest::new(vec![tower_chat::Message::user("hi")]).model(model);
        request.options.stream = true;
        if let Ok(stream) = stack.oneshot(request).await {
            let _ = stream.collect_response().await;
        }
    }
}

#[tokio::test]
async fn a_scrape_is_bounded_whatever_the_model_names() {
    let metrics = PrometheusMetrics::new();
    // The worst a client can do without `[upstreams]`: huge names first, then the longest admitted names,
    // every series of each, on two providers; then more names, which must all land in `other`.
    for i in 0..8 {
        record_every_series(&metrics, "openai", &format!("{i}{}", "m".repeat(100_000))).await;
    }
    for i in 0..MAX_SERIES {
        let name = format!("{i:0>width$}", width = MAX_LABEL_BYTES);
        for provider in ["openai", "anthropic"] {
            record_every_series(&metrics, provider, &name).await;
        }
    }
    let scrape = metrics.render();
    let (full, series) = (scrape.len(), scrape.lines().count());
    for i in 0..64 {
        record_every_series(&metrics, "openai", &format!("late-{i}")).await;
    }
    // No new series: only the `other` series' values grow (a count or a duration sum may gain a digit).
    let scrape = metrics.render();
    assert_eq!(
        scrape.lines().count(),
        series,
        "new series after the label cap"
    );
    let after = scrape.len();
    assert!(after <= full + 1024, "{full} -> {after} bytes");
    // The bound stated in BENCHMARKS.md.
    println!("a full scrape: {full} bytes");
    assert!(full < 6 << 20, "{full} bytes");
}
