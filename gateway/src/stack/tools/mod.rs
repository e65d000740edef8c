//! The gateway's server-side tools, each opt-in: `add` (`--add-tool`, on with `--demo`), `read_file` and
//! `write_file` (`--files DIR`; the latter needs approval), the file tools confined to one root directory.
//! With none configured the model sees exactly the client's tools and no tool name is reserved.

pub(crate) mod sandbox;

use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Number, Value};
use tower_chat::ChatError;
use tower_chat_function_invocation::{tool_json, CompiledTool, ToolContext, ToolError};

/// Names every server-side tool may take (their calls never reach the client); those a gateway reserves are
/// the ones it offers ([`server_tool_names`]).
pub const SERVER_TOOLS: [&str; 3] = ["add", "read_file", "write_file"];

/// The server-side tools `config` turns on, whose names client tools must not take.
pub fn server_tool_names(config: &crate::Config) -> Vec<&'static str> {
    let mut names = Vec::new();
    if config.add_tool {
        names.push("add");
    }
    if config.files.is_some() {
        names.extend(["read_file", "write_file"]);
    }
    names
}

pub use crate::stack::tools::sandbox::{Existing, Sandbox, MAX_READ_BYTES};

/// The server-side tools: `add` when `add` is set, `read_file` and `write_file` only when a files root is
/// given (`--files DIR`, which must exist). Without one the file tools do not exist at all: a gateway started
/// in a folder holding its keys file or a `.env` must not serve them.
pub fn server_tools(root: Option<&Path>, add: bool) -> Result<Vec<CompiledTool>, ChatError> {
    server_tools_in(root.map(open_sandbox).transpose()?, add)
}

/// The sandbox of `--files DIR`, opened once: the file tools and the console's preview of a write share it.
pub fn open_sandbox(root: &Path) -> Result<Arc<Sandbox>, ChatError> {
    Sandbox::new(root).map(Arc::new).map_err(|e| {
        ChatError::new(
            tower_chat::ErrorKind::InvalidRequest,
            format!("--files {}: {e}", root.display()),
        )
    })
}

/// [`server_tools`] with the file tools confined to `sandbox` (none without one).
pub fn server_tools_in(
    sandbox: Option<Arc<Sandbox>>,
    add: bool,
) -> Result<Vec<CompiledTool>, ChatError> {
    let mut tools = Vec::new();
    if add {
        tools.push(add_tool()?);
    }
    if let Some(sandbox) = sandbox {
        tools.extend(file_tools(sandbox)?);
    }
    Ok(tools)
}

/// `add`: two numbers in, their sum out (the demo's tool round).
fn add_tool() -> Result<CompiledTool, ChatError> {
    tool_json(
        "add",
        "Adds two numbers and returns the sum.",
        json!({
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
            "additionalProperties": false,
        }),
        |args: Value, _ctx: ToolContext| async move { add(&args["a"], &args["b"]) },
    )
    .compile()
}

/// `read_file` and `write_file` (with approval), confined to `sandbox`.
fn file_tools(sandbox: Arc<Sandbox>) -> Result<[CompiledTool; 2], ChatError> {
    let reader = sandbox.clone();
    let read_file = tool_json(
        "read_file",
        "Reads a UTF-8 text file. `path` is relative to the gateway's files directory.",
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Relative path of the file."}},
            "required": ["path"],
            "additionalProperties": false,
        }),
        move |args: Value, _ctx: ToolContext| {
            let sandbox = reader.clone();
            async move {
                let path = args["path"].as_str().unwrap_or_default().to_owned();
                sandbox.read(&path).await
            }
        },
    )
    .compile()?;
    let writer = sandbox;
    let write_file = tool_json(
        "write_file",
        "Writes a UTF-8 text file (creating or replacing it). `path` is relative to the gateway's files \
         directory. A human must approve each call.",
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Relative path of the file."},
                "content": {"type": "string", "description": "The whole new content."}
            },
            "required": ["path", "content"],
            "additionalProperties": false,
        }),
        move |args: Value, _ctx: ToolContext| {
            let sandbox = writer.clone();
            async move {
                let path = args["path"].as_str().unwrap_or_default().to_owned();
                let content = args["content"].as_str().unwrap_or_default().to_owned();
                sandbox.write(&path, &content).await
            }
        },
    )
    .with_approval()
    .compile()?;
    Ok([read_file, write_file])
}

/// The sum as a JSON number: integers stay integers (`2 + 3` is `5`, not `5.0`).
fn add(a: &Value, b: &Value) -> Result<Value, ToolError> {
    let (Some(a), Some(b)) = (a.as_number(), b.as_number()) else {
        return Err(ToolError::invalid_arguments("`a` and `b` must be numbers"));
    };
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if let Some(sum) = x.checked_add(y) {
            return Ok(Value::from(sum));
        }
    }
    let sum = a.as_f64().unwrap_or(f64::NAN) + b.as_f64().unwrap_or(f64::NAN);
    Number::from_f64(sum)
        .map(Value::Number)
        .ok_or_else(|| ToolError::new("the sum is not a finite number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_keeps_integers_and_sums_floats() {
        assert_eq!(add(&json!(2), &json!(3)).unwrap(), json!(5));
        assert_eq!(add(&json!(1.5), &json!(2)).unwrap(), json!(3.5));
        assert_eq!(
            add(&json!(i64::MAX), &json!(1)).unwrap(),
            json!(9.223372036854776e18)
        );
        assert!(add(&json!("2"), &json!(3)).is_err());
    }
}
