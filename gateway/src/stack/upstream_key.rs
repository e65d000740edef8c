//! Where an upstream's key comes from, checked at start: a configuration that could not authenticate is refused
//! before the gateway serves, with the upstream and the variable named, instead of starting and failing (or
//! blaming the client) on every request.
//!
//! An upstream either names the environment variable holding its key (`--upstream-key-env VAR`, `key_env = "VAR"`
//! in `[upstreams]`), names a file holding it (`key_file = "PATH"` in `[upstreams]`, its final line break
//! dropped), or says that it takes none (`--no-upstream-key`, `no_key = true`: a local vLLM or Ollama). A named
//! variable must be a valid name (`[A-Za-z_][A-Za-z0-9_]*`), be set, hold a non-empty key; a named file must be
//! readable and not empty; and the key must fit in an HTTP header (no line breaks or other control characters).

use std::fmt;
use std::path::Path;

use http::HeaderValue;
use tower_chat::{ChatError, ErrorKind};

pub use crate::config::credential::KeySource;

impl KeySource<'_> {
    /// The key, read and checked; `None` for a keyless upstream. `upstream` names the upstream in the error.
    pub fn read(self, upstream: &str) -> Result<Option<String>, UpstreamKeyError> {
        let variable = match self {
            KeySource::Env(variable) => variable,
            KeySource::File(path) => return read_file(path, upstream).map(Some),
            KeySource::None => return Ok(None),
        };
        let error = |problem| UpstreamKeyError {
            upstream: upstream.to_owned(),
            variable: variable.to_owned(),
            from_file: false,
            problem,
        };
        if !is_variable_name(variable) {
            return Err(error(KeyProblem::InvalidName));
        }
        let key = match std::env::var(variable) {
            Ok(key) => key,
            Err(std::env::VarError::NotPresent) => return Err(error(KeyProblem::Unset)),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(error(KeyProblem::NotAHeaderValue))
            }
        };
        if key.is_empty() {
            return Err(error(KeyProblem::Empty));
        }
        // Every byte the header may hold (the `x-api-key` value is the key alone, `Authorization` prefixes it).
        if HeaderValue::from_str(&key).is_err() || key.trim() != key {
            return Err(error(KeyProblem::NotAHeaderValue));
        }
        Ok(Some(key))
    }
}

/// The key in the file at `path`: its content without the final line break editors and `echo` add.
fn read_file(path: &Path, upstream: &str) -> Result<String, UpstreamKeyError> {
    let error = |problem| UpstreamKeyError {
        upstream: upstream.to_owned(),
        variable: path.display().to_string(),
        from_file: true,
        problem,
    };
    let content = std::fs::read(path).map_err(|_| error(KeyProblem::Unreadable))?;
    let key = String::from_utf8(content).map_err(|_| error(KeyProblem::NotAHeaderValue))?;
    let key = key
        .strip_suffix("\r\n")
        .or_else(|| key.strip_suffix('\n'))
        .unwrap_or(&key);
    if key.is_empty() {
        return Err(error(KeyProblem::Empty));
    }
    if HeaderValue::from_str(key).is_err() || key.trim() != key {
        return Err(error(KeyProblem::NotAHeaderValue));
    }
    Ok(key.to_owned())
}

/// Whether `name` is a portable environment variable name.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What is wrong with an upstream's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyProblem {
    /// The variable's name is empty or not a valid environment variable name.
    InvalidName,
    /// The variable is not set.
    Unset,
    /// The file cannot be read (missing, not a file, no permission).
    Unreadable,
    /// The variable or file is empty.
    Empty,
    /// The key holds a line break, another control character, surrounding whitespace or non-UTF-8 bytes: it
    /// cannot be sent in a header.
    NotAHeaderValue,
}

/// An upstream whose key cannot be used: which upstream, which variable, what is wrong (never the key itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamKeyError {
    upstream: String,
    /// The variable's name, or the file's path.
    variable: String,
    from_file: bool,
    problem: KeyProblem,
}

impl UpstreamKeyError {
    /// The upstream, as the configuration names it.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The environment variable (or the file's path, for a key read from a file).
    pub fn variable(&self) -> &str {
        &self.variable
    }

    /// What is wrong.
    pub fn problem(&self) -> KeyProblem {
        self.problem
    }
}

impl fmt::Display for UpstreamKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let UpstreamKeyError {
            upstream, variable, ..
        } = self;
        if self.from_file {
            let problem = match self.problem {
                KeyProblem::Empty => "is empty",
                KeyProblem::NotAHeaderValue => {
                    "holds a key that cannot be sent in an HTTP header (a line break inside it, another control \
                     character, surrounding whitespace or non-UTF-8 bytes)"
                }
                _ => "cannot be read",
            };
            return write!(
                f,
                "upstream {upstream}: the key file `{variable}` {problem}"
            );
        }
        match self.problem {
            KeyProblem::InvalidName => write!(
                f,
                "upstream {upstream}: `{variable}` is not an environment variable name (letters, digits and `_`, \
                 not starting with a digit)"
            )?,
            KeyProblem::Unset => write!(
                f,
                "upstream {upstream}: the environment variable `{variable}` holding its key is not set"
            )?,
            KeyProblem::Empty => write!(
                f,
                "upstream {upstream}: the environment variable `{variable}` holding its key is empty"
            )?,
            KeyProblem::Unreadable => write!(
                f,
                "upstream {upstream}: the environment variable `{variable}` cannot be read"
            )?,
            KeyProblem::NotAHeaderValue => write!(
                f,
                "upstream {upstream}: the key in `{variable}` cannot be sent in an HTTP header (a line break, \
                 another control character or surrounding whitespace)"
            )?,
        }
        if matches!(self.problem, KeyProblem::Unset | KeyProblem::Empty) {
            f.write_str(
                "; for an upstream that takes no key, say so: --no-upstream-key, or `no_key = true` in \
                 [upstreams]; to try the gateway offline, with no key: --demo",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for UpstreamKeyError {}

impl From<UpstreamKeyError> for ChatError {
    fn from(error: UpstreamKeyError) -> Self {
        ChatError::new(ErrorKind::InvalidRequest, error.to_string()).with_source(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_read_only_from_a_valid_set_non_empty_header_safe_variable() {
        let read = |variable: &str| KeySource::Env(variable).read("https://up.example/v1");
        let problem = |variable: &str| read(variable).unwrap_err().problem();
        for name in ["", "1KEY", "MY-KEY", "MY KEY", "KEY=x", "$KEY"] {
            assert_eq!(problem(name), KeyProblem::InvalidName, "{name:?}");
        }
        assert_eq!(
            problem("TOWER_CHAT_UPSTREAM_KEY_TEST_UNSET"),
            KeyProblem::Unset
        );
        std::env::set_var("TOWER_CHAT_UPSTREAM_KEY_TEST_EMPTY", "");
        assert_eq!(
            problem("TOWER_CHAT_UPSTREAM_KEY_TEST_EMPTY"),
            KeyProblem::Empty
        );
        for (i, bad) in ["sk-a\r\nX-Injected: 1", "sk-a\n", "sk-\x7fa", " sk-a"]
            .iter()
            .enumerate()
        {
            let name = format!("TOWER_CHAT_UPSTREAM_KEY_TEST_BAD_{i}");
            std::env::set_var(&name, bad);
            assert_eq!(problem(&name), KeyProblem::NotAHeaderValue, "{bad:?}");
        }
        std::env::set_var("TOWER_CHAT_UPSTREAM_KEY_TEST_GOOD", "sk-good_1");
        assert_eq!(
            read("TOWER_CHAT_UPSTREAM_KEY_TEST_GOOD")
                .unwrap()
                .as_deref(),
            Some("sk-good_1")
        );
        assert_eq!(KeySource::None.read("http://127.0.0.1:1/v1"), Ok(None));
    }

    #[test]
    fn a_key_file_is_read_without_its_final_line_break_and_checked_like_a_variable() {
        let dir = std::env::temp_dir().join(format!("tower-chat-key-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, content: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, content).unwrap();
            path
        };
        let read = |path: &Path| KeySource::File(path).read("`gemini/flash` (https://g.example)");
        assert_eq!(
            read(&file("good", b"g-key\n")).unwrap().as_deref(),
            Some("g-key")
        );
        assert_eq!(
            read(&file("crlf", b"g-key\r\n")).unwrap().as_deref(),
            Some("g-key")
        );
        let problem = |path: &Path| read(path).unwrap_err().problem();
        assert_eq!(problem(&file("empty", b"\n")), KeyProblem::Empty);
        assert_eq!(
            problem(&file("two-lines", b"g-key\nX: 1\n")),
            KeyProblem::NotAHeaderValue
        );
        assert_eq!(
            problem(&file("latin1", b"g-\xe9")),
            KeyProblem::NotAHeaderValue
        );
        assert_eq!(problem(&dir.join("missing")), KeyProblem::Unreadable);
        let error = read(&file("secret", b"g-secret\nmore")).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("the key file"), "{message}");
        assert!(message.contains("`gemini/flash`"), "{message}");
        assert!(!message.contains("g-secret"), "{message}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_message_names_the_upstream_and_the_variable_never_the_key() {
        std::env::set_var("TOWER_CHAT_UPSTREAM_KEY_TEST_SECRET", "sk-secret\n");
        let error = KeySource::Env("TOWER_CHAT_UPSTREAM_KEY_TEST_SECRET")
            .read("`openai/gpt-4o` (https://api.openai.com/v1)")
            .unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("`openai/gpt-4o` (https://api.openai.com/v1)"),
            "{message}"
        );
        assert!(
            message.contains("TOWER_CHAT_UPSTREAM_KEY_TEST_SECRET"),
            "{message}"
        );
        assert!(!message.contains("sk-secret"), "{message}");
        let unset = KeySource::Env("TOWER_CHAT_UPSTREAM_KEY_TEST_NEVER_SET")
            .read("x")
            .unwrap_err();
        assert!(unset.to_string().contains("--no-upstream-key"), "{unset}");
    }
}
