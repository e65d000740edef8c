//! An axum app of your own serving OpenAI Chat Completions over a tower-chat stack: its own `GET /health`, its
//! own bearer-token check, and `POST /v1/chat/completions` from `tower-chat-wire` nested beside them. Any OpenAI
//! client works against it.
//!
//! `cargo run --example embed` (from the repository root), then:
//!
//! ```text
//! curl http://127.0.0.1:3000/v1/chat/completions -H 'authorization: Bearer sk-embed' \
//!     -H 'content-type: application/json' \
//!     -d '{"model": "scripted-model", "messages": [{"role": "user", "content": "Weather in Oslo?"}]}'
//! ```
//!
//! Offline: a scripted OpenAI-compatible provider starts on loopback and the real HTTP leaf talks to it; the
//! stack's tool loop runs `get_weather` itself, so the client sees the answer only. `EMBED_LISTEN` sets the
//! address (default `127.0.0.1:3000`), `EMBED_TOKEN` the token the app requires (default `sk-embed`).

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat_stack::prelude::*;
use tower_chat_wire::WireRouter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider = ScriptedProvider::start(scripted_model).await;
    let listen = std::env::var("EMBED_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let token = std::env::var("EMBED_TOKEN").unwrap_or_else(|_| "sk-embed".into());
    let app = app(&provider.base_url(), token)?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// The app: the stack over the provider at `upstream`, its chat route behind a check for `token`.
pub fn app(upstream: &str, token: String) -> Result<Router, ChatError> {
    let weather = tool_json(
        "get_weather",
        "Current weather in a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args: Value, _ctx| async move {
            // A real tool would call a weather API here.
            Ok::<_, String>(json!({"city": args["city"], "report": "4°C, light snow"}))
        },
    );
    let stack = ServiceBuilder::new().tool_loop([weather])?.service(
        OpenAiChat::builder()
            .base_url(upstream)
            .model("scripted-model")
            .build()?,
    );
    let chat = WireRouter::new(stack)
        .chat_completions()
        .route_layer(middleware::from_fn_with_state(token, require_token));
    Ok(Router::new()
        .route("/health", get(|| async { "ok" }))
        .merge(chat))
}

/// The app's own authentication: a bearer token, and the caller it names handed to the stack (call records,
/// limits and approvals are kept per caller).
async fn require_token(State(token): State<String>, mut request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    if presented != Some(token.as_str()) {
        let body =
            json!({"error": {"message": "this app wants its bearer token", "type": "app_auth"}});
        return (
            StatusCode::UNAUTHORIZED,
            [
                (header::WWW_AUTHENTICATE, "Bearer"),
                (header::CONTENT_TYPE, "application/json"),
            ],
            body.to_string(),
        )
            .into_response();
    }
    request
        .extensions_mut()
        .insert(CallerIdentity::new("embed-client"));
    next.run(request).await
}

/// The scripted model: asks for the weather once, then answers from the tool's result.
pub fn scripted_model(request: &RecordedRequest, _index: usize) -> Reply {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let Some(result) = messages.iter().rev().find(|m| m["role"] == "tool") else {
        return Reply::openai_tool_calls(&[("call_weather", "get_weather", r#"{"city": "Oslo"}"#)]);
    };
    let weather: Value =
        serde_json::from_str(result["content"].as_str().unwrap_or("{}")).unwrap_or_default();
    Reply::openai_text(&format!(
        "In {} it is {} right now.",
        weather["city"].as_str().unwrap_or("?"),
        weather["report"].as_str().unwrap_or("unknown"),
    ))
}
