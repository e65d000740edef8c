//! The gateway's options, one [`Flags`] struct read three ways: the command line (clap), the environment (each
//! option's `TOWER_CHAT_*` variable, read by clap when the flag is absent) and the `[gateway]` table of the
//! `--config` file (serde, under the flag's own name). A flag or its variable overrides the file; the file
//! overrides the defaults ([`Flags::over`]). [`crate::Config`] is built from the merged flags.
//!
//! ```
//! use clap::Parser as _;
//! use tower_chat_gateway::cli::Flags;
//! use tower_chat_gateway::config_file::ConfigFile;
//!
//! let file = ConfigFile::parse("[gateway]\nlisten = \"0.0.0.0:9000\"\nmax-rounds = 4\n", "g.toml").unwrap();
//! let flags = Flags::try_parse_from(["tower-chat-gateway", "--max-rounds", "7"]).unwrap();
//! let merged = flags.over(file.gateway, |_| false);
//! assert_eq!(merged.listen.unwrap().port(), 9000);
//! assert_eq!(merged.max_rounds.unwrap().get(), 7);
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::config::Provider;

const SERVING: &str = "Serving";
const UPSTREAMS: &str = "Upstreams";
const TOOLS: &str = "Tools and approvals";
const CLIENTS: &str = "Clients and auth";
const OPERATORS: &str = "Console and operators";
const STORES: &str = "Stores";
const LIMITS: &str = "Limits of one request";
const CONNECTIONS: &str = "Connections";
const TELEMETRY: &str = "Telemetry";

const AFTER_HELP: &str = "\
Every option can also come from its TOWER_CHAT_* environment variable (shown with it) or from the
[gateway] table of the --config file, under the option's name (`max-rounds = 5`); a flag overrides its
variable, which overrides the file. Switches read `true`/`false` from their variable.

Log lines go to stdout, level from RUST_LOG (default info), coloured only when stdout is a terminal
(NO_COLOR turns colours off).

OpenTelemetry (off unless an endpoint is set): OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 exports
the `chat {model}` spans (with their `execute_tool` children) and the GenAI metrics over OTLP/HTTP
(protobuf), flushed at shutdown. Also read: OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME (default tower-chat-gateway),
OTEL_RESOURCE_ATTRIBUTES, OTEL_{TRACES,METRICS}_EXPORTER=none, OTEL_METRIC_EXPORT_INTERVAL.";

/// Every option of the gateway. `None` (or `false` for a switch) means "not given here".
#[derive(Clone, Debug, Default, PartialEq, clap::Parser, Deserialize)]
#[command(
    name = "tower-chat-gateway",
    version,
    about = "tower-chat gateway: OpenAI Chat Completions, Anthropic Messages and OpenAI Responses endpoints \
             running the tower-chat stack",
    override_usage = "tower-chat-gateway [OPTIONS]\n       \
                      (from a checkout: cargo run --release --example gateway -- [OPTIONS])",
    after_help = AFTER_HELP,
    next_line_help = true,
    max_term_width = 110
)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Flags {
    /// TOML configuration file (see the guide's "Running the gateway"): `[gateway]` holds these options; `[upstreams]` models ->
    /// fallback targets, retry, breakers, timeouts; `[limits]` rate limits and budgets per key; `[[mcp]]` MCP
    /// servers; `[cache]` a response cache. Refused at start if invalid. On SIGHUP the file is read again and a
    /// valid `[upstreams]` replaces the running one (requests in flight finish on the old); an invalid file is
    /// logged and the running configuration kept.
    #[arg(long, env = "TOWER_CHAT_CONFIG", value_name = "PATH", help_heading = SERVING)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long, env = "TOWER_CHAT_LISTEN", value_name = "ADDR", help_heading = SERVING)]
    pub listen: Option<SocketAddr>,
    /// Offline: an in-process scripted upstream answers every model (no key, no network); ask it to add two
    /// numbers to see a tool round. Not with --upstream, --provider, --upstream-key-env, --no-upstream-key or
    /// `[upstreams]`.
    #[arg(long, env = "TOWER_CHAT_DEMO", help_heading = SERVING)]
    pub demo: bool,
    /// Host values the API answers, comma-separated NAME or NAME:PORT (a NAME alone: any port), or `*` for
    /// any; others get 403 host_not_allowed, as do browsers' cross-site requests. Default without
    /// --api-keys-file: the listen address and localhost, 127.0.0.1, `[::1]` at its port; with it: any.
    #[arg(long, env = "TOWER_CHAT_ALLOWED_HOSTS", value_name = "LIST", help_heading = SERVING)]
    pub allowed_hosts: Option<String>,
    /// Drain time for in-flight requests on SIGTERM / Ctrl-C (default 30).
    #[arg(long, env = "TOWER_CHAT_SHUTDOWN_TIMEOUT", value_name = "SECS", help_heading = SERVING)]
    pub shutdown_timeout: Option<Seconds>,

    /// Provider base URL, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:9000/v1` (default: the
    /// provider's public API).
    #[arg(long, env = "TOWER_CHAT_UPSTREAM", value_name = "URL", help_heading = UPSTREAMS)]
    pub upstream: Option<String>,
    /// The upstream's kind (default openai): openai, openai-responses, anthropic, azure or azure-responses
    /// (--upstream is the resource endpoint) or gemini; vertex, anthropic-vertex and bedrock need settings only an `[upstreams]`
    /// target gives.
    #[arg(long, env = "TOWER_CHAT_PROVIDER", value_name = "NAME", help_heading = UPSTREAMS)]
    pub provider: Option<Provider>,
    /// Environment variable holding the upstream key (default: the provider's own, OPENAI_API_KEY,
    /// ANTHROPIC_API_KEY, AZURE_OPENAI_API_KEY, GEMINI_API_KEY); refused at start if unset, empty, or not a key a
    /// header can carry.
    #[arg(long, env = "TOWER_CHAT_UPSTREAM_KEY_ENV", value_name = "VAR", help_heading = UPSTREAMS)]
    pub upstream_key_env: Option<String>,
    /// The upstream takes no key (local vLLM, Ollama): no auth header is sent. Not with --upstream-key-env.
    #[arg(long, env = "TOWER_CHAT_NO_UPSTREAM_KEY", help_heading = UPSTREAMS)]
    pub no_upstream_key: bool,
    /// Upstream first-byte and idle timeout (default 120).
    #[arg(long, env = "TOWER_CHAT_UPSTREAM_TIMEOUT", value_name = "SECS", help_heading = UPSTREAMS)]
    pub upstream_timeout: Option<Seconds>,

    /// Offers the gateway's own `add` tool to every model call (on with --demo; default: no server-side tool,
    /// the model sees exactly the client's tools).
    #[arg(long, env = "TOWER_CHAT_ADD_TOOL", help_heading = TOOLS)]
    pub add_tool: bool,
    /// Enables read_file / write_file, confined to DIR (default: no file tools); a missing DIR is created at
    /// start.
    #[arg(long, env = "TOWER_CHAT_FILES", value_name = "DIR", help_heading = TOOLS)]
    pub files: Option<PathBuf>,
    /// Tool-loop limit (default 10).
    #[arg(long, env = "TOWER_CHAT_MAX_ROUNDS", value_name = "N", help_heading = TOOLS)]
    pub max_rounds: Option<Count>,
    /// How long a paused write_file waits for approval (default 3600).
    #[arg(long, env = "TOWER_CHAT_APPROVAL_TTL", value_name = "SECS", help_heading = TOOLS)]
    pub approval_ttl: Option<Seconds>,
    /// GET /v1/approvals/{id}?wait= long-polls waiting at once per gateway key; more get 429 + Retry-After
    /// (default 16).
    #[arg(long, env = "TOWER_CHAT_MAX_POLLS_PER_KEY", value_name = "N", help_heading = TOOLS)]
    pub max_polls_per_key: Option<Count>,

    /// Clients must send `Authorization: Bearer <key>` with a key listed in PATH.
    #[arg(long, env = "TOWER_CHAT_API_KEYS_FILE", value_name = "PATH", help_heading = CLIENTS)]
    pub api_keys_file: Option<PathBuf>,
    /// With --trusted-proxies: the header (x-forwarded-for, forwarded, x-real-ip, ...) that gives the client
    /// address; the failed-login limit of the operator API and console counts that address instead of the
    /// proxy's.
    #[arg(long, env = "TOWER_CHAT_TRUSTED_PROXY_HEADER", value_name = "NAME", help_heading = CLIENTS)]
    pub trusted_proxy_header: Option<String>,
    /// The proxies whose header is believed: comma-separated addresses and ranges (127.0.0.1,10.0.0.0/8);
    /// from any other peer the header is ignored.
    #[arg(long, env = "TOWER_CHAT_TRUSTED_PROXIES", value_name = "LIST", help_heading = CLIENTS)]
    pub trusted_proxies: Option<String>,

    /// Operators' keys (same format, none shared with client keys): they decide pending approvals with POST
    /// /v1/approvals/{id}/decision (while set, only operators may approve; clients may still deny) and log in
    /// to the web console at /console.
    #[arg(long, env = "TOWER_CHAT_OPERATOR_KEYS_FILE", value_name = "PATH", help_heading = OPERATORS)]
    pub operator_keys_file: Option<PathBuf>,
    /// Do not serve the operator console (/console).
    #[arg(long, env = "TOWER_CHAT_NO_CONSOLE", help_heading = OPERATORS)]
    pub no_console: bool,

    /// SQLite file of the persistence layer (default gateway.db).
    #[arg(long, env = "TOWER_CHAT_DB", value_name = "PATH", help_heading = STORES)]
    pub db: Option<PathBuf>,
    /// PostgreSQL instead of SQLite.
    #[arg(long, env = "TOWER_CHAT_DATABASE_URL", value_name = "URL", help_heading = STORES)]
    pub database_url: Option<String>,
    /// Do not record calls: no call log, spend or conversations to resume (approvals and keys are still kept).
    #[arg(long, env = "TOWER_CHAT_NO_RECORDS", help_heading = STORES)]
    pub no_records: bool,
    /// Delete recorded calls (messages, media, search entries) older than N days, hourly; spend sums stay
    /// (default: keep every call).
    #[arg(long, env = "TOWER_CHAT_RETENTION_DAYS", value_name = "N", help_heading = STORES)]
    pub retention_days: Option<Count>,

    /// Larger request bodies get 413, not counting base64 media (default 4194304).
    #[arg(long, env = "TOWER_CHAT_BODY_LIMIT", value_name = "BYTES", help_heading = LIMITS)]
    pub body_limit: Option<Count>,
    /// Messages (and tool calls) in one request (default 1024).
    #[arg(long, env = "TOWER_CHAT_MAX_MESSAGES", value_name = "N", help_heading = LIMITS)]
    pub max_messages: Option<Count>,
    /// Client tools in one request (default 128).
    #[arg(long, env = "TOWER_CHAT_MAX_TOOLS", value_name = "N", help_heading = LIMITS)]
    pub max_tools: Option<Count>,
    /// Client tools' names, descriptions and schemas together (default 262144).
    #[arg(long, env = "TOWER_CHAT_MAX_SCHEMA_BYTES", value_name = "N", help_heading = LIMITS)]
    pub max_schema_bytes: Option<Count>,
    /// Approval decisions in one request (default 64).
    #[arg(long, env = "TOWER_CHAT_MAX_APPROVALS", value_name = "N", help_heading = LIMITS)]
    pub max_approvals: Option<Count>,
    /// Longest tool call id, tool name or approval id (default 256).
    #[arg(long, env = "TOWER_CHAT_MAX_ID_BYTES", value_name = "N", help_heading = LIMITS)]
    pub max_id_bytes: Option<Count>,
    /// One image, audio clip or file, decoded (default 20971520).
    #[arg(long, env = "TOWER_CHAT_MAX_MEDIA_PART_BYTES", value_name = "N", help_heading = LIMITS)]
    pub max_media_part_bytes: Option<Count>,
    /// All media parts of one request, decoded (default 33554432).
    #[arg(long, env = "TOWER_CHAT_MAX_MEDIA_BYTES", value_name = "N", help_heading = LIMITS)]
    pub max_media_bytes: Option<Count>,

    /// From a request's first byte to its complete head (default 10).
    #[arg(long, env = "TOWER_CHAT_HEADER_TIMEOUT", value_name = "SECS", help_heading = CONNECTIONS)]
    pub header_timeout: Option<Seconds>,
    /// From a request's head to the end of its body, else 408 (default 30).
    #[arg(long, env = "TOWER_CHAT_BODY_TIMEOUT", value_name = "SECS", help_heading = CONNECTIONS)]
    pub body_timeout: Option<Seconds>,
    /// A connection with no request in flight and no response being written is closed after this
    /// (default 60).
    #[arg(long, env = "TOWER_CHAT_IDLE_TIMEOUT", value_name = "SECS", help_heading = CONNECTIONS)]
    pub idle_timeout: Option<Seconds>,
    /// A response the client stops reading is dropped, and its connection closed, once no byte of it could be
    /// written for this long (default 30).
    #[arg(long, env = "TOWER_CHAT_WRITE_TIMEOUT", value_name = "SECS", help_heading = CONNECTIONS)]
    pub write_timeout: Option<Seconds>,
    /// Open connections; more get 503 and are closed (default 16384, lowered to what the open-files limit
    /// allows).
    #[arg(long, env = "TOWER_CHAT_MAX_CONNECTIONS", value_name = "N", help_heading = CONNECTIONS)]
    pub max_connections: Option<Count>,
    /// Requests in flight, streams included; more get 503 + Retry-After (default 4096).
    #[arg(long, env = "TOWER_CHAT_MAX_IN_FLIGHT", value_name = "N", help_heading = CONNECTIONS)]
    pub max_in_flight: Option<Count>,
    /// Requests in flight per gateway key; more get 429 + Retry-After (default 256).
    #[arg(long, env = "TOWER_CHAT_MAX_IN_FLIGHT_PER_KEY", value_name = "N", help_heading = CONNECTIONS)]
    pub max_in_flight_per_key: Option<Count>,
    /// Media bytes (decoded images, audio, files) of all requests in flight together; a request that would
    /// pass it gets 503 + Retry-After (default 268435456).
    #[arg(long, env = "TOWER_CHAT_MAX_MEDIA_IN_FLIGHT", value_name = "BYTES", help_heading = CONNECTIONS)]
    pub max_media_in_flight: Option<Count>,

    /// Serve GET /metrics on this address only (default: on --listen).
    #[arg(long, env = "TOWER_CHAT_METRICS_LISTEN", value_name = "ADDR", help_heading = TELEMETRY)]
    pub metrics_listen: Option<SocketAddr>,
    /// GET /metrics requires `Authorization: Bearer <key>`, the key read from VAR (refused at start when VAR
    /// is unset or empty; default: no key).
    #[arg(long, env = "TOWER_CHAT_METRICS_KEY_ENV", value_name = "VAR", help_heading = TELEMETRY)]
    pub metrics_key_env: Option<String>,
    /// Telemetry spans carry message contents, tool arguments and results (also
    /// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true); off by default.
    #[arg(long, env = "TOWER_CHAT_RECORD_CONTENT", help_heading = TELEMETRY)]
    pub record_content: bool,
    /// Do not trace calls: no `chat {model}` spans, and GET /metrics counts no chat calls (a plain proxy).
    #[arg(long, env = "TOWER_CHAT_NO_TRACING", help_heading = TELEMETRY)]
    pub no_tracing: bool,
}

/// `$flags` (given on the command line or in the environment) over `$file`: each option the first has, else
/// the second's; a switch from the first when `$given` says it was set there.
macro_rules! over {
    ($flags:ident, $file:ident, $given:ident; options: $($option:ident),*; switches: $($switch:ident),*) => {
        Flags {
            $($option: $flags.$option.or($file.$option),)*
            $($switch: if $given(stringify!($switch)) { $flags.$switch } else { $file.$switch },)*
        }
    };
}

impl Flags {
    /// These flags over `file` (the `[gateway]` table): an option given here wins. `given(id)` says whether the
    /// switch `id` (the field's name) was set on the command line or in the environment, where an explicit
    /// `false` must win over the file's `true` (see [`Flags::given_in`]).
    pub fn over(self, file: Flags, given: impl Fn(&str) -> bool) -> Flags {
        let flags = self;
        over!(flags, file, given;
            options: config, listen, allowed_hosts, shutdown_timeout, upstream, provider, upstream_key_env,
                upstream_timeout, files, max_rounds, approval_ttl, max_polls_per_key, api_keys_file,
                trusted_proxy_header, trusted_proxies, operator_keys_file, db, database_url, retention_days, body_limit,
                max_messages, max_tools, max_schema_bytes, max_approvals, max_id_bytes, max_media_part_bytes,
                max_media_bytes, header_timeout, body_timeout, idle_timeout, write_timeout, max_connections,
                max_in_flight, max_in_flight_per_key, max_media_in_flight, metrics_listen, metrics_key_env;
            switches: demo, add_tool, no_upstream_key, no_console, record_content, no_records,
                no_tracing)
    }

    /// Whether the argument `id` of `matches` came from the command line or the environment (not a default).
    pub fn given_in(matches: &clap::ArgMatches, id: &str) -> bool {
        matches.value_source(id).is_some_and(|source| {
            matches!(
                source,
                clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable
            )
        })
    }
}

/// A positive whole number (`--max-rounds`, `--body-limit`, every `--max-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count(usize);

impl Count {
    /// The number.
    pub fn get(self) -> usize {
        self.0
    }
}

impl FromStr for Count {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.parse()
            .ok()
            .filter(|n| *n > 0)
            .map(Count)
            .ok_or_else(|| "expected a positive integer".to_owned())
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let n = u64::deserialize(deserializer)?;
        usize::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .map(Count)
            .ok_or_else(|| serde::de::Error::custom("expected a positive integer"))
    }
}

/// A positive number of seconds, fractions allowed (`--shutdown-timeout 0.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(Duration);

impl Seconds {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }

    fn new(seconds: f64) -> Result<Self, String> {
        if seconds.is_finite() && seconds > 0.0 {
            Ok(Seconds(Duration::from_secs_f64(seconds)))
        } else {
            Err("expected a positive number of seconds".to_owned())
        }
    }
}

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.parse::<f64>()
            .map_err(|_| "expected a positive number of seconds".to_owned())
            .and_then(Seconds::new)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Seconds::new(f64::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, FromArgMatches as _};

    use super::*;

    fn cli(args: &[&str]) -> (Flags, clap::ArgMatches) {
        let matches = Flags::command()
            .try_get_matches_from(std::iter::once("tower-chat-gateway").chain(args.iter().copied()))
            .unwrap();
        (Flags::from_arg_matches(&matches).unwrap(), matches)
    }

    fn file(text: &str) -> Flags {
        crate::config::file::ConfigFile::parse(text, "g.toml")
            .unwrap()
            .gateway
    }

    #[test]
    fn a_flag_overrides_the_file_and_the_file_the_defaults() {
        let from_file = file("[gateway]\nmax-rounds = 4\nlisten = \"0.0.0.0:9000\"\ndemo = true\n");
        let (flags, matches) = cli(&["--max-rounds", "7"]);
        let merged = flags.over(from_file.clone(), |id| Flags::given_in(&matches, id));
        assert_eq!(merged.max_rounds, Some(Count(7)), "the flag wins");
        assert_eq!(
            merged.listen.map(|a| a.port()),
            Some(9000),
            "the file fills in"
        );
        assert!(
            merged.demo,
            "a switch the command line leaves alone keeps the file's value"
        );
        assert_eq!(
            merged.body_limit, None,
            "neither: the default applies later"
        );
        let (flags, matches) = cli(&[]);
        let merged = flags.over(from_file, |id| Flags::given_in(&matches, id));
        assert_eq!(merged.max_rounds, Some(Count(4)));
    }

    #[test]
    fn the_file_refuses_what_the_command_line_refuses() {
        for (text, needle) in [
            ("[gateway]\nmax-rounds = 0\n", "positive integer"),
            (
                "[gateway]\nshutdown-timeout = -1\n",
                "positive number of seconds",
            ),
            ("[gateway]\nprovider = \"cohere\"\n", "openai"),
            ("[gateway]\nlisten = \"nowhere\"\n", "address"),
            ("[gateway]\nmax_rounds = 3\n", "unknown field"),
            ("[gateway]\nconfig = \"other.toml\"\n", "unknown field"),
        ] {
            let err = crate::config::file::ConfigFile::parse(text, "g.toml").unwrap_err();
            assert_eq!(err.line(), Some(2), "{text}: {err}");
            assert!(err.message().contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn every_option_has_an_environment_variable_and_a_group() {
        let command = Flags::command();
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let expected = format!("TOWER_CHAT_{}", id.to_uppercase());
            assert_eq!(
                arg.get_env().and_then(|v| v.to_str()),
                Some(expected.as_str()),
                "{id}"
            );
            assert!(arg.get_help_heading().is_some(), "{id} has no group");
        }
    }

    /// The guide's `[gateway]` example parses, and says what it seems to.
    #[test]
    fn the_documented_example_is_valid() {
        let page = include_str!("../../../docs/src/gateway/running.md");
        let start = page.find("[gateway]\nlisten").unwrap();
        let end = start + page[start..].find("```").unwrap();
        let file = crate::config::file::ConfigFile::parse(&page[start..end], "running.md")
            .unwrap_or_else(|e| panic!("{e}"));
        let config = crate::Config::from_flags(file.gateway.clone(), file).unwrap();
        assert_eq!(config.listen.to_string(), "0.0.0.0:8080");
        assert_eq!(config.max_rounds, 5);
        assert_eq!(config.upstream_timeout, Duration::from_secs(60));
        assert_eq!(config.files, Some(PathBuf::from("./sandbox")));
    }
}
