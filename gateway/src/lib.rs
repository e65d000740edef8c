//! # tower-chat-gateway
//!
//! An HTTP gateway (axum) running the whole tower-chat stack behind three wire formats — OpenAI Chat Completions
//! (`POST /v1/chat/completions`), Anthropic Messages (`POST /v1/messages`) and OpenAI Responses
//! (`POST /v1/responses`, with `previous_response_id` from the store), each streaming and not: opt-in server-side
//! tools (`add`, `read_file`, `write_file` with approval through the approval layer) run by the tool loop, every call
//! recorded by the persistence layer (SQLite or PostgreSQL), telemetry through the tracing layer, `GET /healthz`,
//! gateway keys, each format's own error shape and graceful shutdown. Official OpenAI and Anthropic client
//! libraries work against it unmodified. The formats themselves (parsers, encoders, error shapes, the routes)
//! are the `tower-chat-wire` crate, which an axum app of its own can nest without the rest of the gateway; the
//! gateway serves those same routes over its stack, whose outermost layer keeps and resumes turns.
//!
//! From the repository root: `cargo run --release --example gateway -- --demo` (offline, a scripted model, no
//! key: [`demo`]) or `-- --upstream http://127.0.0.1:9000/v1`.
//! In-process (how the tests run it):
//!
//! ```no_run
//! use tower_chat_gateway::{Config, Gateway};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = Config::new("http://127.0.0.1:9000/v1");
//! config.files = Some("./docs".into());
//! let gateway = Gateway::new(&config).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! println!("listening on {}", listener.local_addr()?);
//! gateway.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! The guide (`docs/src/gateway/`) documents the command line, the approval protocol and curl examples.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

pub mod api;
pub mod config;
pub mod edge;
mod error;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;
mod gateway;
pub(crate) mod keys;
pub mod operator;
pub mod stack;
mod startup_error;
mod startup_summary;
pub mod telemetry;
mod turn;

// The module paths from before the folders, kept for users of the crate.
pub use api::request_size as request_limits;
pub use config::{cli, file as config_file};
pub use edge::{browser_guard as api_guard, client_addr, in_flight as connection};
pub use stack::{
    cache, demo, guardrail, mcp, rate_limits as limits, stores, structured, tools, upstream_key,
    upstreams,
};
pub use telemetry::metrics;

use std::process::ExitCode;

pub use config::{CliError, Command, Config, Provider};
pub use edge::auth::ApiKeys;
pub use error::{ApiError, DEFAULT_RETRY_AFTER, MAX_ERROR_MESSAGE};
pub use gateway::Gateway;
pub use stack::stores::{stores, Stores};
pub use stack::{stack, ChatStack, StackOptions, Upstream};
pub use startup_error::GatewayError;
pub use telemetry::metrics::PrometheusMetrics;
pub use tower_chat_wire::{ApprovalAnswer, ApprovalNotice};
pub use turn::pending::PendingStore;

/// Build and serve the gateway `config` describes until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> Result<(), GatewayError> {
    run_with(config, None).await
}

/// [`run`], told that the program created the `--files` folder ([`Config::prepare_files`]) so the start-up
/// summary says so.
async fn run_with(
    mut config: Config,
    created_files: Option<std::path::PathBuf>,
) -> Result<(), GatewayError> {
    // Connections are file descriptors: use what the hard limit allows, and keep some for the database,
    // upstream connections and files.
    if let Some(open_files) = edge::in_flight::raise_open_files_limit() {
        let usable = usize::try_from(open_files.saturating_sub(256))
            .unwrap_or(usize::MAX)
            .max(1);
        if config.connections.max_connections > usable {
            tracing::warn!(
                max_connections = config.connections.max_connections,
                open_files,
                usable,
                "--max-connections lowered to what the open-files limit allows"
            );
            config.connections.max_connections = usable;
        }
    }
    // Kept alive until the server stops: the scripted upstream `--demo` sends every model to.
    let demo = if config.demo {
        let demo = stack::demo::DemoUpstream::start().await;
        config.upstream = demo.base_url();
        config.provider = Provider::OpenAi;
        config.no_upstream_key = true;
        Some(demo)
    } else {
        None
    };
    let gateway = Gateway::new(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(GatewayError::Io)?;
    let addr = listener.local_addr().map_err(GatewayError::Io)?;
    tracing::info!(
        "{}",
        startup_summary::describe(&config, addr, created_files.as_deref())
    );
    if let Some(metrics_addr) = config.metrics_listen {
        let metrics = tokio::net::TcpListener::bind(metrics_addr)
            .await
            .map_err(GatewayError::Io)?;
        tracing::info!(addr = %metrics_addr, "metrics listening (GET /metrics)");
        let router = gateway.metrics_router();
        tokio::spawn(async move {
            if let Err(error) = axum::serve(metrics, router).await {
                tracing::error!(%error, "the metrics listener failed");
            }
        });
    }
    #[cfg(unix)]
    if let Some(reloader) = gateway.reloader() {
        match reload_on_sighup(reloader) {
            Ok(task) => {
                tokio::spawn(task);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP: no configuration reload")
            }
        }
    }
    gateway
        .serve(listener, shutdown_signal())
        .await
        .map_err(GatewayError::Io)?;
    tracing::info!("gateway stopped");
    drop(demo);
    Ok(())
}

/// Listen for SIGHUP now, and return the task that, on every SIGHUP, reads `--config` again and swaps in its
/// `[upstreams]` ([`upstreams::Reloader`]); a file that does not load or build is logged and the running
/// configuration stays. The listener is installed before this returns, so a SIGHUP sent afterwards is never the
/// default "terminate".
#[cfg(unix)]
pub fn reload_on_sighup(
    reloader: stack::upstreams::Reloader,
) -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(async move {
        while hangup.recv().await.is_some() {
            match reloader.reload() {
                Ok(()) => tracing::info!("SIGHUP: [upstreams] reloaded"),
                Err(error) => {
                    tracing::error!(%error, "SIGHUP: reload refused, the running configuration stays")
                }
            }
        }
    })
}

/// Resolves on Ctrl-C, or on SIGTERM on Unix.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// The whole program: parse `args` (without the program name), set up logging from `RUST_LOG` and OpenTelemetry
/// export from the `OTEL_*` variables ([`telemetry`]), run, flush the telemetry.
pub fn main_with_args<I, S>(args: I) -> ExitCode
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let config = match Config::parse(args) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let mut config = *config;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Logging from `RUST_LOG`, and OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (its requests run on
    // this runtime).
    let telemetry = {
        let _entered = runtime.enter();
        match telemetry::install(&mut config) {
            Ok(telemetry) => telemetry,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        }
    };
    let created_files = match config.prepare_files() {
        Ok(created) => created,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(run_with(config, created_files));
    // After the server stopped, before the runtime does: the last spans and metrics go out on it.
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Serving failed (the address is taken, …): a runtime failure.
        Err(error @ GatewayError::Io(_)) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
        // The configuration cannot be used (an unset key variable, an unreadable keys file, a bad URL): a
        // usage error, as a bad command line is.
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// The README's examples, compiled as doctests so every snippet a reader copies builds (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
