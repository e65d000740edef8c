//! The gateway's server-side tools: `add`, `read_file` and `write_file` (the latter needs approval), the file
//! tools confined to one root directory.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Number, Value};
use tower_chat::ChatError;
use tower_chat_function_invocation::{tool_json, CompiledTool, ToolContext, ToolError};

/// Names of the server-side tools: their calls never reach the client.
pub const SERVER_TOOLS: [&str; 3] = ["add", "read_file", "write_file"];

/// The most bytes `read_file` returns; larger files are refused rather than flooding the model's context.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// The three tools, the file tools rooted at `root` (which must exist).
pub fn server_tools(root: &Path) -> Result<Vec<CompiledTool>, ChatError> {
    let sandbox = Arc::new(Sandbox::new(root).map_err(|e| {
        ChatError::new(
            tower_chat::ErrorKind::InvalidRequest,
            format!("--files {}: {e}", root.display()),
        )
    })?);
    let add = tool_json(
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
    .compile()?;
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
    Ok(vec![add, read_file, write_file])
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

/// A directory the file tools cannot leave.
#[derive(Debug)]
pub struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    /// Confine to `root` (canonicalized here, so later checks compare real paths).
    pub fn new(root: &Path) -> io::Result<Self> {
        let root = root.canonicalize()?;
        if !root.is_dir() {
            return Err(io::Error::other("not a directory"));
        }
        Ok(Sandbox { root })
    }

    /// Refuse paths that are empty or absolute before touching the file system. `..` is checked after
    /// resolution instead, so `a/../b` inside the root still works while an escape is caught.
    fn relative<'a>(&self, path: &'a str) -> Result<&'a Path, ToolError> {
        let relative = Path::new(path);
        if path.is_empty() {
            return Err(ToolError::invalid_arguments("`path` must not be empty"));
        }
        if relative.has_root()
            || relative
                .components()
                .any(|c| matches!(c, Component::Prefix(_) | Component::RootDir))
        {
            return Err(ToolError::new(format!(
                "refused: `{path}` is an absolute path; give a path relative to the files directory"
            )));
        }
        Ok(relative)
    }

    fn inside(&self, resolved: &Path, path: &str) -> Result<(), ToolError> {
        if resolved.starts_with(&self.root) {
            Ok(())
        } else {
            Err(ToolError::new(format!(
                "refused: `{path}` leads outside the files directory"
            )))
        }
    }

    /// Resolve an existing file: symlinks and `..` are resolved by the OS, and the result must be inside.
    /// Nothing is opened before that check passes.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, ToolError> {
        let relative = self.relative(path)?;
        let resolved = self
            .root
            .join(relative)
            .canonicalize()
            .map_err(|e| ToolError::new(format!("cannot read `{path}`: {}", io_reason(&e))))?;
        self.inside(&resolved, path)?;
        Ok(resolved)
    }

    /// `read_file`.
    pub async fn read(&self, path: &str) -> Result<String, ToolError> {
        let resolved = self.resolve_existing(path)?;
        let metadata = tokio::fs::metadata(&resolved)
            .await
            .map_err(|e| ToolError::new(format!("cannot read `{path}`: {}", io_reason(&e))))?;
        if !metadata.is_file() {
            return Err(ToolError::new(format!("cannot read `{path}`: not a file")));
        }
        if metadata.len() > MAX_READ_BYTES {
            return Err(ToolError::new(format!(
                "cannot read `{path}`: {} bytes is more than the limit of {MAX_READ_BYTES}",
                metadata.len()
            )));
        }
        let bytes = tokio::fs::read(&resolved)
            .await
            .map_err(|e| ToolError::new(format!("cannot read `{path}`: {}", io_reason(&e))))?;
        String::from_utf8(bytes)
            .map_err(|_| ToolError::new(format!("cannot read `{path}`: not UTF-8 text")))
    }

    /// `write_file`: stricter than reading, as the target may not exist yet: no `..` at all, the deepest
    /// existing ancestor must resolve inside, and an existing target that is a symlink must resolve inside too.
    pub async fn write(&self, path: &str, content: &str) -> Result<String, ToolError> {
        let relative = self.relative(path)?;
        if relative
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(ToolError::new(format!(
                "refused: `{path}` contains `..`; give a plain relative path"
            )));
        }
        if relative.file_name().is_none() {
            return Err(ToolError::invalid_arguments(format!(
                "`{path}` does not name a file"
            )));
        }
        let target = self.root.join(relative);
        let mut ancestor = target.parent().unwrap_or(&self.root).to_path_buf();
        while !ancestor.exists() {
            ancestor = ancestor
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| self.root.clone());
        }
        let real_ancestor = ancestor
            .canonicalize()
            .map_err(|e| ToolError::new(format!("cannot write `{path}`: {}", io_reason(&e))))?;
        self.inside(&real_ancestor, path)?;
        if let Ok(meta) = tokio::fs::symlink_metadata(&target).await {
            if meta.file_type().is_symlink() {
                let real = target.canonicalize().map_err(|e| {
                    ToolError::new(format!("cannot write `{path}`: {}", io_reason(&e)))
                })?;
                self.inside(&real, path)?;
            } else if meta.is_dir() {
                return Err(ToolError::new(format!(
                    "cannot write `{path}`: a directory"
                )));
            }
        }
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError::new(format!("cannot write `{path}`: {}", io_reason(&e))))?;
        }
        tokio::fs::write(&target, content)
            .await
            .map_err(|e| ToolError::new(format!("cannot write `{path}`: {}", io_reason(&e))))?;
        Ok(format!("wrote {} bytes to {path}", content.len()))
    }
}

/// The reason without the absolute path the OS error may quote (the model must not learn the server's layout).
fn io_reason(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "no such file".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.kind().to_string(),
    }
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

    #[tokio::test]
    async fn paths_are_confined_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "inside").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
        let sandbox = Sandbox::new(&root).unwrap();
        assert_eq!(sandbox.read("sub/a.txt").await.unwrap(), "inside");
        assert_eq!(sandbox.read("sub/../sub/a.txt").await.unwrap(), "inside");
        for bad in ["../secret.txt", "sub/../../secret.txt"] {
            let err = sandbox.read(bad).await.unwrap_err();
            assert!(
                err.message().contains("outside"),
                "{bad}: {}",
                err.message()
            );
        }
        let absolute = dir.path().join("secret.txt");
        let err = sandbox.read(absolute.to_str().unwrap()).await.unwrap_err();
        assert!(err.message().contains("absolute"), "{}", err.message());
        assert!(sandbox.read("").await.is_err());
        assert!(sandbox
            .read("sub")
            .await
            .unwrap_err()
            .message()
            .contains("not a file"));
        let err = sandbox.write("../x.txt", "x").await.unwrap_err();
        assert!(err.message().contains(".."), "{}", err.message());
        assert!(!dir.path().join("x.txt").exists());
        sandbox.write("new/dir/b.txt", "hello").await.unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("new/dir/b.txt")).unwrap(),
            "hello"
        );
    }
}
