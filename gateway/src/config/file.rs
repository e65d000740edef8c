//! `--config gateway.toml`: the gateway's configuration file.
//!
//! `[gateway]` holds the command line's options (a flag overrides its key there); the other tables hold what
//! flags cannot express well (several upstreams, per-key limits, MCP servers, …). Each concern owns one top-level table of the file and one
//! field of [`ConfigFile`]; unknown tables and keys are refused, so a typo never passes silently. A file that does
//! not parse is refused at start with its path, the line and column, and the reason.
//!
//! ```
//! use tower_chat_gateway::config_file::ConfigFile;
//!
//! let file = ConfigFile::parse("", "gateway.toml").unwrap();
//! assert_eq!(file, ConfigFile::default());
//! let err = ConfigFile::parse("no_such_table = 1\n", "gateway.toml").unwrap_err();
//! assert!(err.to_string().contains("gateway.toml"));
//! assert!(err.to_string().contains("line 1"));
//! ```

use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// The parsed configuration file. Every table is optional; an empty file is the flags' defaults.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[gateway]`: the command line's options under their flags' names (`max-rounds = 5`); a flag or its
    /// environment variable overrides them ([`crate::config::cli`]).
    #[serde(default)]
    pub gateway: super::cli::Flags,
    /// `[upstreams]`: models, their fallback targets, retry, breakers, timeouts ([`crate::stack::upstreams`]).
    #[serde(default)]
    pub upstreams: super::upstreams::UpstreamsSection,
    /// `[limits]`: rate limits and budgets per key, prices ([`crate::stack::rate_limits`]).
    #[serde(default)]
    pub limits: super::limits::LimitsSection,
    /// `[keys]`: how the managed keys' table is kept current ([`crate::config::keys`]).
    #[serde(default)]
    pub keys: super::keys::KeysSection,
    /// `[[mcp]]`: MCP servers whose tools the tool loop offers (see [`crate::stack::mcp`]).
    #[serde(default)]
    pub mcp: Vec<super::mcp::McpServerEntry>,
    /// `[cache]`: a response cache, off without the table ([`crate::stack::cache`]).
    pub cache: Option<super::cache::CacheSection>,
    /// `[guardrail]`: content policies per caller, route and model, off without the table
    /// ([`crate::stack::guardrail`]).
    pub guardrail: Option<super::guardrail::GuardrailSection>,
    /// `[structured]`: JSON answers validated and repaired, off without the table ([`crate::stack::structured`]).
    pub structured: Option<super::structured::StructuredSection>,
}

impl ConfigFile {
    /// Read and parse the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigFileError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError {
            origin: origin.clone(),
            line: None,
            message: format!("cannot read it: {e}"),
        })?;
        Self::parse(&text, &origin)
    }

    /// Parse `text`; `origin` names it in errors (usually the file's path).
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigFileError> {
        toml::from_str(text).map_err(|e: toml::de::Error| ConfigFileError {
            origin: origin.to_owned(),
            line: e.span().map(|span| line_column(text, span.start)),
            message: e.message().to_owned(),
        })
    }
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// A configuration file that could not be read or does not describe a valid configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigFileError {
    origin: String,
    line: Option<(usize, usize)>,
    message: String,
}

impl ConfigFileError {
    /// An error found after parsing (a value that parsed but cannot be used), at `line` when known.
    pub fn invalid(origin: &str, line: Option<usize>, message: impl Into<String>) -> Self {
        ConfigFileError {
            origin: origin.to_owned(),
            line: line.map(|l| (l, 1)),
            message: message.into(),
        }
    }

    /// The 1-based line the error is on, when it is on one.
    pub fn line(&self) -> Option<usize> {
        self.line.map(|(line, _)| line)
    }

    /// The reason, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some((line, column)) => write!(
                f,
                "{}: line {line}, column {column}: {}",
                self.origin, self.message
            ),
            None => write!(f, "{}: {}", self.origin, self.message),
        }
    }
}

impl std::error::Error for ConfigFileError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_table_is_refused_with_its_line() {
        let err = ConfigFile::parse("\n\n[nope]\nx = 1\n", "g.toml").unwrap_err();
        assert_eq!(err.line(), Some(3), "{err}");
        assert!(err.to_string().starts_with("g.toml: line 3"), "{err}");
    }

    #[test]
    fn broken_syntax_is_refused_with_its_line() {
        let err = ConfigFile::parse("\n[a\n", "g.toml").unwrap_err();
        assert_eq!(err.line(), Some(2), "{err}");
    }

    #[test]
    fn a_missing_file_names_the_path() {
        let err = ConfigFile::load(Path::new("/nonexistent/g.toml")).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("/nonexistent/g.toml: cannot read it"));
    }
}
