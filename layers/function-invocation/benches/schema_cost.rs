//! What a tool's argument schema costs: compiling it, validating a call, and the resident memory of a process
//! holding the quickstart's stack. Not a criterion bench: each mode does a fixed amount of work once, for
//! `valgrind --tool=callgrind` instruction counts (subtract the `N = 0` run for the fixed start-up part) or for
//! reading `VmRSS`.
//!
//! ```sh
//! cargo bench -p tower-chat-function-invocation --bench schema_cost --no-run   # prints the binary's path
//! SCHEMA_COST=compile N=10 valgrind --tool=callgrind --callgrind-out-file=/dev/null <binary>
//! SCHEMA_COST=rss <binary>
//! ```
//!
//! Modes (`SCHEMA_COST`), each `N` times (env `N`, default 1):
//! - `compile`: `CompiledTool::new` on the quickstart's `get_weather` tool (schemars-derived schema, derived once
//!   before the loop); `compile_schema`: `schema::Schema::compile` alone on that schema;
//!   `compile_jsonschema`: `jsonschema::validator_for` on it (what `CompiledTool::new` called before).
//! - `validate`: `CompiledTool::validate` of a valid call (`{"city": "Oslo"}`); `validate_invalid`: of an invalid
//!   one (`{"city": 7, "extra": true}`, message built); `validate_jsonschema` / `validate_invalid_jsonschema`:
//!   the same through a `jsonschema` validator with the code `CompiledTool::validate` had before.
//! - `rss`: builds the quickstart's stack (multi-thread Tokio runtime, the scripted OpenAI-compatible provider on
//!   loopback, the `OpenAiChat` leaf, `FunctionInvocationLayer` with `get_weather` and `add`), then prints
//!   `VmRSS` from `/proc/self/status` at process start and after the stack is built; `rss_jsonschema` also
//!   compiles `jsonschema` validators for both schemas (what the tools held before) and prints `VmRSS` again.

use std::hint::black_box;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::ToolArguments;
use tower_chat_function_invocation::schema::Schema;
use tower_chat_function_invocation::{
    tool_fn, tool_json, CompiledTool, FunctionInvocationLayer, ToolContext,
};
use tower_layer::Layer;

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Weather {
    /// The city, e.g. "Oslo".
    city: String,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Add {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
}

/// The schema `tool_fn` derives for the quickstart's `get_weather` (without `$schema` and `title`).
fn weather_schema() -> Value {
    let mut schema = schemars::schema_for!(Weather).to_value();
    let object = schema.as_object_mut().expect("an object schema");
    object.remove("$schema");
    object.remove("title");
    schema
}

fn weather_tool(schema: Value) -> CompiledTool {
    tool_json(
        "get_weather",
        "Current weather in a city",
        schema,
        |args, _ctx| async move { Ok::<_, String>(args) },
    )
    .compile()
    .expect("the weather schema compiles")
}

/// `CompiledTool::validate` as it was with `jsonschema` (for the "before" figures).
fn validate_with_jsonschema(
    validator: &jsonschema::Validator,
    value: &Value,
) -> Result<Value, String> {
    if validator.is_valid(value) {
        return Ok(value.clone());
    }
    let mut message = "invalid arguments for tool `get_weather`:".to_owned();
    let mut errors = validator.iter_errors(value);
    for error in errors.by_ref().take(10) {
        let path = error.instance_path.to_string();
        let at = if path.is_empty() { "/" } else { path.as_str() };
        message.push_str(&format!("\n- at {at}: {error}"));
    }
    let more = errors.count();
    if more > 0 {
        message.push_str(&format!("\n- and {more} more"));
    }
    Err(message)
}

fn vm_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "VmRSS: unknown".to_owned())
}

fn scripted_model(_request: &RecordedRequest, _index: usize) -> Reply {
    Reply::openai_text("ok")
}

fn rss(with_jsonschema: bool) {
    println!("at start: {}", vm_rss());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let provider = ScriptedProvider::start(scripted_model).await;
        let leaf = OpenAiChat::builder()
            .base_url(provider.base_url())
            .model("scripted-model")
            .provider_name("scripted")
            .build()
            .expect("the leaf builds");
        let weather = tool_fn(
            "get_weather",
            "Current weather in a city",
            |w: Weather, _: ToolContext| async move { Ok::<_, String>(w.city) },
        )
        .compile()
        .expect("compiles");
        let add = tool_fn(
            "add",
            "Adds two numbers",
            |a: Add, _: ToolContext| async move { Ok::<_, String>(a.a + a.b) },
        )
        .compile()
        .expect("compiles");
        let schemas = [
            weather.spec().parameters.clone(),
            add.spec().parameters.clone(),
        ];
        let chat = FunctionInvocationLayer::new()
            .tool(weather)
            .expect("adds")
            .tool(add)
            .expect("adds")
            .max_rounds(5)
            .layer(leaf);
        println!("stack built: {}", vm_rss());
        if with_jsonschema {
            let validators: Vec<_> = schemas
                .iter()
                .map(|s| jsonschema::validator_for(s).expect("compiles"))
                .collect();
            println!("plus jsonschema validators for both schemas: {}", vm_rss());
            black_box(validators);
        }
        black_box((chat, provider));
    });
}

fn main() {
    let mode = std::env::var("SCHEMA_COST").unwrap_or_else(|_| "rss".to_owned());
    let n: usize = std::env::var("N").map_or(1, |n| n.parse().expect("N=<count>"));
    let schema = weather_schema();
    let valid = ToolArguments::Json(json!({"city": "Oslo"}));
    let invalid = ToolArguments::Json(json!({"city": 7, "extra": true}));
    match mode.as_str() {
        "compile" => {
            for _ in 0..n {
                black_box(weather_tool(black_box(schema.clone())));
            }
        }
        "compile_schema" => {
            for _ in 0..n {
                black_box(Schema::compile(black_box(&schema)).expect("compiles"));
            }
        }
        "compile_jsonschema" => {
            for _ in 0..n {
                black_box(jsonschema::validator_for(black_box(&schema)).expect("compiles"));
            }
        }
        "validate" | "validate_invalid" => {
            let tool = weather_tool(schema);
            let arguments = if mode == "validate" { &valid } else { &invalid };
            assert_eq!(tool.validate(arguments).is_ok(), mode == "validate");
            for _ in 0..n {
                let _ = black_box(tool.validate(black_box(arguments)));
            }
        }
        "validate_jsonschema" | "validate_invalid_jsonschema" => {
            let validator = jsonschema::validator_for(&schema).expect("compiles");
            let arguments = if mode == "validate_jsonschema" {
                &valid
            } else {
                &invalid
            };
            let ToolArguments::Json(value) = arguments else {
                unreachable!()
            };
            assert_eq!(
                validate_with_jsonschema(&validator, value).is_ok(),
                mode == "validate_jsonschema"
            );
            for _ in 0..n {
                let _ = black_box(validate_with_jsonschema(&validator, black_box(value)));
            }
        }
        "rss" => rss(false),
        "rss_jsonschema" => rss(true),
        other => panic!("SCHEMA_COST={other}: see the module docs for the modes"),
    }
}
