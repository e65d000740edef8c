//! The tool loop over a scripted model, and tools that count their runs; the rest comes from the kit.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tower::Layer;
use tower_chat_function_invocation::{
    tool_json, CompiledTool, FunctionInvocation, FunctionInvocationLayer, ToolContext,
};
pub use tower_chat_testkit::*;

pub fn stack(layer: FunctionInvocationLayer, inner: Chat) -> FunctionInvocation<Chat> {
    layer.layer(inner)
}

pub fn city_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": false
    })
}

/// A `weather` tool that counts its runs.
pub fn weather(runs: Arc<AtomicUsize>) -> CompiledTool {
    tool_json(
        "weather",
        "Weather in a city",
        city_schema(),
        move |args: Value, _ctx: ToolContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(format!("sunny in {}", args["city"].as_str().unwrap()))
            }
        },
    )
    .compile()
    .unwrap()
}

/// A tool named `name` with any object arguments whose body counts runs and returns `result`.
pub fn counting(
    name: &str,
    runs: Arc<AtomicUsize>,
    result: Result<&'static str, &'static str>,
) -> CompiledTool {
    tool_json(
        name,
        "test tool",
        json!({"type": "object"}),
        move |_args: Value, _ctx: ToolContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                result.map(str::to_owned).map_err(str::to_owned)
            }
        },
    )
    .compile()
    .unwrap()
}
