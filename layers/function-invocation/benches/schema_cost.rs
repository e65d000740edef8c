//! What a tool's argument schema costs: compiling it, validating a call, and the resident memory of a process
//! holding the quickstart's stack. Not a criterion bench: each mode does a fixed amount of work once, for
//! `valgrind --tool=callgrind` instruction counts (subtract the `N = 0` run for the fixed start-up part) or for
//! reading `VmRSS`.
//!
//! ```sh
//! cargo bench -p tower-chat-function-invocation --bench schema_cost --no-run   # prints the binary's path
//! SCHEMA_COST=compile SCHEMA=booking N=10 valgrind --tool=callgrind --callgrind-out-file=/dev/null <binary>
//! SCHEMA_COST=rss <binary>
//! ```
//!
//! Schemas (`SCHEMA`, default `weather`), each with a valid and an invalid call:
//! - `weather`: the quickstart's `get_weather` (schemars-derived, one required string);
//! - `booking`: a schemars-derived struct with optional fields, a nested struct and an enum with unit and data
//!   variants (`$defs`, `$ref`, `oneOf`, `const`, nullable types);
//! - `add`, `read_file`, `write_file`: the gateway's server tools (hand-written, copied from `gateway/src/tools.rs`).
//!
//! Modes (`SCHEMA_COST`), each `N` times (env `N`, default 1):
//! - `compile`: `CompiledTool::new` on a tool with that schema (the schema built once before the loop);
//!   `compile_schema`: `schema::Schema::compile` alone; `compile_jsonschema`: `jsonschema::validator_for` on it
//!   (the `jsonschema` crate as the peer).
//! - `validate` / `validate_invalid`: `CompiledTool::validate` of the valid / invalid call (the message built);
//!   `validate_jsonschema` / `validate_invalid_jsonschema`: the same through a `jsonschema` validator, with the
//!   message built the same way.
//! - `rss`: builds the quickstart's stack (multi-thread Tokio runtime, the scripted OpenAI-compatible provider on
//!   loopback, the `OpenAiChat` leaf, `FunctionInvocationLayer` with `get_weather` and `add`), then prints
//!   `VmRSS` from `/proc/self/status` at process start and after the stack is built; `rss_jsonschema` also
//!   compiles `jsonschema` validators for both schemas and prints `VmRSS` again.

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

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Booking {
    /// Where to stay.
    city: String,
    /// Nights, 1 to 30; one when left out.
    #[schemars(range(min = 1, max = 30))]
    nights: Option<u32>,
    room: Room,
    /// Who to send the confirmation to.
    contact: Option<Contact>,
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Room {
    Single,
    Double,
    /// A suite on a given floor.
    Suite {
        floor: u8,
    },
}

#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
struct Contact {
    email: String,
    phone: Option<String>,
}

/// The schema `tool_fn` derives for `T` (without `$schema` and `title`).
fn derived<T: JsonSchema>() -> Value {
    let mut schema = schemars::schema_for!(T).to_value();
    let object = schema.as_object_mut().expect("an object schema");
    object.remove("$schema");
    object.remove("title");
    schema
}

/// A schema by its `SCHEMA` name, with a valid and an invalid call.
fn schema_named(name: &str) -> (Value, Value, Value) {
    let object = |properties: Value, required: &[&str]| {
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    };
    match name {
        "weather" => (
            derived::<Weather>(),
            json!({"city": "Oslo"}),
            json!({"city": 7, "extra": true}),
        ),
        "booking" => (
            derived::<Booking>(),
            json!({"city": "Oslo", "nights": 2, "room": {"suite": {"floor": 3}},
                   "contact": {"email": "a@example.com", "phone": null}}),
            json!({"city": "Oslo", "nights": 0, "room": "penthouse", "contact": {"phone": 5}}),
        ),
        "add" => (
            object(
                json!({"a": {"type": "number"}, "b": {"type": "number"}}),
                &["a", "b"],
            ),
            json!({"a": 2, "b": 3.5}),
            json!({"a": "2"}),
        ),
        "read_file" => (
            object(
                json!({"path": {"type": "string", "description": "Relative path of the file."}}),
                &["path"],
            ),
            json!({"path": "notes/today.md"}),
            json!({"path": ["notes"], "mode": "r"}),
        ),
        "write_file" => (
            object(
                json!({
                    "path": {"type": "string", "description": "Relative path of the file."},
                    "content": {"type": "string", "description": "The whole new content."}
                }),
                &["path", "content"],
            ),
            json!({"path": "notes/today.md", "content": "Buy milk."}),
            json!({"path": "notes/today.md", "content": null}),
        ),
        other => panic!("SCHEMA={other}: one of weather, booking, add, read_file, write_file"),
    }
}

fn tool_with(name: &str, schema: Value) -> CompiledTool {
    tool_json(
        name,
        "A tool with the measured schema",
        schema,
        |args, _ctx| async move { Ok::<_, String>(args) },
    )
    .compile()
    .expect("the schema compiles")
}

/// `CompiledTool::validate`'s work done with a `jsonschema` validator (the peer's figures).
fn validate_with_jsonschema(
    validator: &jsonschema::Validator,
    value: &Value,
) -> Result<Value, String> {
    if validator.is_valid(value) {
        return Ok(value.clone());
    }
    let mut message = "invalid arguments for tool `measured`:".to_owned();
    let mut errors = validator.iter_errors(value);
    for error in errors.by_ref().take(10) {
        let path = error.instance_path().to_string();
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
    let name = std::env::var("SCHEMA").unwrap_or_else(|_| "weather".to_owned());
    let (schema, valid, invalid) = schema_named(&name);
    match mode.as_str() {
        "compile" => {
            for _ in 0..n {
                black_box(tool_with("measured", black_box(schema.clone())));
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
            let tool = tool_with("measured", schema);
            let ok = mode == "validate";
            let arguments = ToolArguments::Json(if ok { valid } else { invalid });
            assert_eq!(tool.validate(&arguments).is_ok(), ok);
            for _ in 0..n {
                let _ = black_box(tool.validate(black_box(&arguments)));
            }
        }
        "validate_jsonschema" | "validate_invalid_jsonschema" => {
            let validator = jsonschema::validator_for(&schema).expect("compiles");
            let ok = mode == "validate_jsonschema";
            let value = if ok { valid } else { invalid };
            assert_eq!(validate_with_jsonschema(&validator, &value).is_ok(), ok);
            for _ in 0..n {
                let _ = black_box(validate_with_jsonschema(&validator, black_box(&value)));
            }
        }
        "rss" => rss(false),
        "rss_jsonschema" => rss(true),
        other => panic!("SCHEMA_COST={other}: see the module docs for the modes"),
    }
}
