//! `Otlp::from_env`: off without an endpoint, typed refusals of what it cannot do. (What it exports is checked
//! end to end against a loopback collector by the gateway's `tests/otlp.rs`.) One test function: it sets
//! process environment variables, which other threads of this binary must not race.

use tower_chat_tracing::otlp::{Otlp, OtlpError};

const VARIABLES: [&str; 7] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
];

#[test]
fn export_follows_the_environment() {
    for name in VARIABLES {
        std::env::remove_var(name);
    }
    // Worker threads run the export tasks (to a closed port) while the providers shut down on drop.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    // No endpoint: nothing to set up, even outside a runtime.
    assert!(Otlp::from_env("svc").unwrap().is_none());

    // An endpoint, but no runtime to send through.
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9");
    assert!(matches!(Otlp::from_env("svc"), Err(OtlpError::NoRuntime)));

    let _entered = runtime.enter();
    let both = Otlp::from_env("svc").unwrap().expect("an endpoint is set");
    assert!(both.tracer_provider().is_some() && both.meter_provider().is_some());
    assert!(both.metrics().is_some());

    // One signal off.
    std::env::set_var("OTEL_TRACES_EXPORTER", "none");
    let metrics_only = Otlp::from_env("svc").unwrap().unwrap();
    assert!(metrics_only.tracer_provider().is_none() && metrics_only.meter_provider().is_some());
    std::env::set_var("OTEL_METRICS_EXPORTER", "none");
    assert!(Otlp::from_env("svc").unwrap().is_none(), "both signals off");
    std::env::remove_var("OTEL_TRACES_EXPORTER");
    std::env::remove_var("OTEL_METRICS_EXPORTER");

    // A per-signal endpoint alone enables that signal alone.
    std::env::remove_var("OTEL_EXPORTER_OTLP_ENDPOINT");
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "http://127.0.0.1:9/v1/traces",
    );
    let traces_only = Otlp::from_env("svc").unwrap().unwrap();
    assert!(traces_only.tracer_provider().is_some() && traces_only.meter_provider().is_none());
    assert!(traces_only.metrics().is_none());

    // What it cannot do is refused, naming the variable.
    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    let error = Otlp::from_env("svc").unwrap_err();
    assert!(
        matches!(
            error,
            OtlpError::Config {
                variable: "OTEL_EXPORTER_OTLP_PROTOCOL",
                ..
            }
        ),
        "{error}"
    );
    std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    std::env::set_var("OTEL_EXPORTER_OTLP_TIMEOUT", "soon");
    let error = Otlp::from_env("svc").unwrap_err();
    assert!(
        error.to_string().contains("OTEL_EXPORTER_OTLP_TIMEOUT"),
        "{error}"
    );
}
