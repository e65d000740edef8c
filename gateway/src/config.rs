//! The command line: `--listen`, `--upstream`, `--provider`, … parsed into a [`Config`].

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::api_guard::AllowedHosts;
use crate::client_addr::TrustedProxies;
use crate::config_file::{ConfigFile, ConfigFileError};
use crate::connection::ConnectionLimits;
use crate::request_limits::RequestLimits;

/// Which wire format the upstream provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI Chat Completions (OpenAI, vLLM, Ollama, DeepSeek, …).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// The environment variable holding the upstream key when `--upstream-key-env` is not given.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    fn default_upstream(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com/v1",
        }
    }
}

/// Everything the gateway is configured with. Build one with [`Config::parse`] or by hand
/// ([`Config::new`] gives the command line's defaults).
#[derive(Clone, Debug)]
pub struct Config {
    /// `--listen ADDR` (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// `--upstream URL`: the provider's base URL (default: the provider's public API).
    pub upstream: String,
    /// `--provider openai|anthropic` (default `openai`).
    pub provider: Provider,
    /// `--upstream-key-env VAR`: where the upstream key is read from; `None` uses the provider's default
    /// variable. The variable must be set to a key that fits in a header, else the gateway refuses to start
    /// ([`crate::upstream_key`]).
    pub upstream_key_env: Option<String>,
    /// `--no-upstream-key`: the upstream takes no key (a local vLLM or Ollama); no auth header is sent. Not
    /// with `--upstream-key-env`.
    pub no_upstream_key: bool,
    /// `--db PATH`: SQLite file of the persistence layer (default `gateway.db`).
    pub db: PathBuf,
    /// `--database-url URL`: PostgreSQL instead of SQLite.
    pub database_url: Option<String>,
    /// `--files DIR`: root of the `read_file` / `write_file` tools. `None` (the default): no file tools at all.
    /// The program creates a missing folder at start ([`Config::prepare_files`]).
    pub files: Option<PathBuf>,
    /// `--demo`: no provider is called; an in-process scripted upstream ([`crate::demo`]) answers every model,
    /// so the gateway works with no key and no network. Not with `--upstream`, `--provider`,
    /// `--upstream-key-env`, `--no-upstream-key` or `[upstreams]`.
    pub demo: bool,
    /// `--api-keys-file PATH`: when set, clients must send one of the listed keys as a bearer token.
    pub api_keys_file: Option<PathBuf>,
    /// `--operator-keys-file PATH`: keys (same format, none shared with `--api-keys-file`) of the operators who
    /// may decide pending approvals (`POST /v1/approvals/{id}/decision`); while set, only operators may approve.
    pub operator_keys_file: Option<PathBuf>,
    /// The operator console at `/console` (served while operator keys are configured); `--no-console` turns it
    /// off (default on).
    pub console: bool,
    /// `--allowed-hosts LIST`: the `Host` values the API routes answer (`*`: any). `None`: the default of
    /// [`AllowedHosts::default_for`] — without client keys the listen address and loopback names at its port,
    /// with client keys any host.
    pub allowed_hosts: Option<AllowedHosts>,
    /// `--trusted-proxy-header NAME` with `--trusted-proxies LIST`: behind these reverse proxies the failed-login
    /// limit counts the client address the header reports, not the proxy's (see [`crate::client_addr`]).
    pub trusted_proxies: Option<TrustedProxies>,
    /// `--max-rounds N`: the tool loop's round limit (default 10).
    pub max_rounds: usize,
    /// `--body-limit BYTES`: larger request bodies are refused with 413 (default 4 MiB).
    pub body_limit: usize,
    /// `--shutdown-timeout SECS`: how long in-flight requests may run on after SIGTERM / Ctrl-C (default 30).
    pub shutdown_timeout: Duration,
    /// `--upstream-timeout SECS`: first-byte and idle timeout of upstream calls (default 120).
    pub upstream_timeout: Duration,
    /// `--approval-ttl SECS`: how long a paused call waits for its approval (default 3600).
    pub approval_ttl: Duration,
    /// `--max-polls-per-key N`: `GET /v1/approvals/{id}?wait=` long-polls waiting at once per caller (callers
    /// without a gateway key count as one); more get `429 too_many_polls` with `Retry-After` (default 16).
    pub max_polls_per_key: usize,
    /// `--max-messages`, `--max-tools`, `--max-schema-bytes`, `--max-approvals`, `--max-id-bytes`: what one
    /// request may hold.
    pub limits: RequestLimits,
    /// `--header-timeout`, `--body-timeout`, `--idle-timeout`, `--write-timeout`, `--max-connections`,
    /// `--max-in-flight`, `--max-in-flight-per-key`.
    pub connections: ConnectionLimits,
    /// `--config PATH`: the configuration file, parsed (empty when not given).
    pub file: ConfigFile,
    /// `--config PATH`: where the file was read, so that SIGHUP can read it again (`None` without `--config`).
    pub config_path: Option<PathBuf>,
    /// `--record-content` (or `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`): the telemetry's call
    /// spans carry message contents, tool arguments and results (`gen_ai.input.messages`,
    /// `gen_ai.output.messages`). Off by default: they can hold personal data and secrets.
    pub record_content: bool,
    /// `--metrics-listen ADDR`: serve `GET /metrics` on this address instead of the main listener (`None`, the
    /// default: on the main listener).
    pub metrics_listen: Option<SocketAddr>,
    /// `--metrics-key-env VAR`: `GET /metrics` requires `Authorization: Bearer <the variable's value>`; an unset
    /// or empty variable is refused at start (`None`, the default: no key).
    pub metrics_key_env: Option<String>,
    /// Where the stack's tracing layer also records the GenAI client histograms, besides `GET /metrics`: set by
    /// the program when OTLP export is on (`telemetry::install`), or by hand with a meter of your own.
    pub otel_metrics: Option<tower_chat_tracing::OpenTelemetryMetrics>,
}

impl Config {
    /// The defaults of the command line, with this upstream base URL.
    pub fn new(upstream: impl Into<String>) -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            upstream: upstream.into(),
            provider: Provider::OpenAi,
            upstream_key_env: None,
            no_upstream_key: false,
            db: PathBuf::from("gateway.db"),
            database_url: None,
            files: None,
            demo: false,
            api_keys_file: None,
            operator_keys_file: None,
            console: true,
            allowed_hosts: None,
            trusted_proxies: None,
            max_rounds: 10,
            body_limit: 4 * 1024 * 1024,
            shutdown_timeout: Duration::from_secs(30),
            upstream_timeout: Duration::from_secs(120),
            approval_ttl: Duration::from_secs(3600),
            max_polls_per_key: 16,
            limits: RequestLimits::default(),
            connections: ConnectionLimits::default(),
            file: ConfigFile::default(),
            config_path: None,
            record_content: false,
            metrics_listen: None,
            metrics_key_env: None,
            otel_metrics: None,
        }
    }

    /// The environment variable the upstream key is read from.
    pub fn key_env(&self) -> &str {
        self.upstream_key_env
            .as_deref()
            .unwrap_or(self.provider.default_key_env())
    }

    /// Where the single `--upstream`'s key comes from: nowhere with `--no-upstream-key`, else [`Config::key_env`].
    pub fn key_source(&self) -> crate::upstream_key::KeySource<'_> {
        if self.no_upstream_key {
            crate::upstream_key::KeySource::None
        } else {
            crate::upstream_key::KeySource::Env(self.key_env())
        }
    }

    /// Make `--files` usable before the gateway starts: a missing folder is created (with its parents), as a
    /// user following the README expects, and its path returned so the start-up summary can say so; `Ok(None)`
    /// when the folder exists or no `--files` was given. A path that is not a folder, or a folder that cannot
    /// be created, is a command-line error naming the option.
    pub fn prepare_files(&self) -> Result<Option<PathBuf>, CliError> {
        let Some(root) = &self.files else {
            return Ok(None);
        };
        let refuse = |reason: String| CliError::Path {
            option: "--files",
            path: root.clone(),
            reason,
        };
        match std::fs::metadata(root) {
            Ok(meta) if meta.is_dir() => Ok(None),
            Ok(_) => Err(refuse("not a folder".to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(root)
                    .map_err(|e| refuse(format!("cannot create the folder: {e}")))?;
                Ok(Some(root.clone()))
            }
            Err(e) => Err(refuse(e.to_string())),
        }
    }

    /// Parse command-line arguments (without the program name).
    pub fn parse<I, S>(args: I) -> Result<Command, CliError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut config = Config::new("");
        config.record_content = crate::telemetry::content_capture_from_env();
        let mut upstream = None;
        let mut provider_given = false;
        let (mut proxy_header, mut proxies) = (None::<String>, None::<String>);
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            if arg == "-h" || arg == "--help" {
                return Ok(Command::Help);
            }
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) if name.starts_with("--") => {
                    (name.to_owned(), Some(value.to_owned()))
                }
                _ => (arg.clone(), None),
            };
            if !name.starts_with("--") {
                return Err(CliError::Unexpected(arg));
            }
            if matches!(
                name.as_str(),
                "--record-content" | "--no-console" | "--no-upstream-key" | "--demo"
            ) {
                if let Some(value) = inline {
                    return Err(invalid(&name, &value, "no value (it is a switch)"));
                }
                match name.as_str() {
                    "--record-content" => config.record_content = true,
                    "--no-upstream-key" => config.no_upstream_key = true,
                    "--demo" => config.demo = true,
                    _ => config.console = false,
                }
                continue;
            }
            let mut value = || match inline.clone() {
                Some(v) => Ok(v),
                None => args
                    .next()
                    .ok_or_else(|| CliError::MissingValue(name.clone())),
            };
            match name.as_str() {
                "--listen" => {
                    let v = value()?;
                    config.listen = v
                        .parse()
                        .map_err(|_| invalid(&name, &v, "an address like 127.0.0.1:8080"))?;
                }
                "--metrics-listen" => {
                    let v = value()?;
                    config.metrics_listen = Some(
                        v.parse()
                            .map_err(|_| invalid(&name, &v, "an address like 127.0.0.1:9090"))?,
                    );
                }
                "--metrics-key-env" => config.metrics_key_env = Some(value()?),
                "--upstream" => upstream = Some(value()?),
                "--provider" => {
                    let v = value()?;
                    provider_given = true;
                    config.provider = match v.as_str() {
                        "openai" => Provider::OpenAi,
                        "anthropic" => Provider::Anthropic,
                        _ => return Err(invalid(&name, &v, "`openai` or `anthropic`")),
                    };
                }
                "--upstream-key-env" => config.upstream_key_env = Some(value()?),
                "--db" => config.db = PathBuf::from(value()?),
                "--database-url" => config.database_url = Some(value()?),
                "--files" => config.files = Some(PathBuf::from(value()?)),
                "--api-keys-file" => config.api_keys_file = Some(PathBuf::from(value()?)),
                "--operator-keys-file" => config.operator_keys_file = Some(PathBuf::from(value()?)),
                "--allowed-hosts" => {
                    let v = value()?;
                    config.allowed_hosts = Some(AllowedHosts::parse(&v).map_err(|_| {
                        invalid(
                            &name,
                            &v,
                            "a comma list of NAME or NAME:PORT (IPv6 in brackets), or `*` for any host",
                        )
                    })?);
                }
                "--trusted-proxy-header" => proxy_header = Some(value()?),
                "--trusted-proxies" => proxies = Some(value()?),
                "--max-rounds" => {
                    let v = value()?;
                    config.max_rounds = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| invalid(&name, &v, "a positive integer"))?;
                }
                "--body-limit" => {
                    let v = value()?;
                    config.body_limit = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| invalid(&name, &v, "a positive number of bytes"))?;
                }
                "--max-messages" => config.limits.max_messages = count(&name, value()?)?,
                "--max-tools" => config.limits.max_tools = count(&name, value()?)?,
                "--max-schema-bytes" => config.limits.max_schema_bytes = count(&name, value()?)?,
                "--max-approvals" => config.limits.max_approvals = count(&name, value()?)?,
                "--max-id-bytes" => config.limits.max_id_bytes = count(&name, value()?)?,
                "--max-media-part-bytes" => {
                    config.limits.max_media_part_bytes = count(&name, value()?)?
                }
                "--max-media-bytes" => config.limits.max_media_bytes = count(&name, value()?)?,
                "--header-timeout" => config.connections.header_timeout = seconds(&name, value()?)?,
                "--body-timeout" => config.connections.body_timeout = seconds(&name, value()?)?,
                "--idle-timeout" => config.connections.idle_timeout = seconds(&name, value()?)?,
                "--write-timeout" => config.connections.write_timeout = seconds(&name, value()?)?,
                "--max-connections" => config.connections.max_connections = count(&name, value()?)?,
                "--max-in-flight" => config.connections.max_in_flight = count(&name, value()?)?,
                "--max-in-flight-per-key" => {
                    config.connections.max_in_flight_per_key = count(&name, value()?)?
                }
                "--shutdown-timeout" => config.shutdown_timeout = seconds(&name, value()?)?,
                "--upstream-timeout" => config.upstream_timeout = seconds(&name, value()?)?,
                "--approval-ttl" => config.approval_ttl = seconds(&name, value()?)?,
                "--max-polls-per-key" => config.max_polls_per_key = count(&name, value()?)?,
                "--config" => {
                    let path = PathBuf::from(value()?);
                    config.file = ConfigFile::load(&path).map_err(CliError::File)?;
                    config.config_path = Some(path);
                }
                _ => return Err(CliError::Unknown(name)),
            }
        }
        if config.no_upstream_key && config.upstream_key_env.is_some() {
            return Err(CliError::Conflict(
                "--no-upstream-key",
                "--upstream-key-env",
            ));
        }
        if config.demo {
            let conflict = if upstream.is_some() {
                Some("--upstream")
            } else if provider_given {
                Some("--provider")
            } else if config.upstream_key_env.is_some() {
                Some("--upstream-key-env")
            } else if config.no_upstream_key {
                Some("--no-upstream-key")
            } else if !config.file.upstreams.models.is_empty() {
                Some("[upstreams] in --config")
            } else {
                None
            };
            if let Some(other) = conflict {
                return Err(CliError::Conflict("--demo", other));
            }
        }
        config.upstream = upstream.unwrap_or_else(|| config.provider.default_upstream().to_owned());
        config.trusted_proxies = match (proxy_header, proxies) {
            (None, None) => None,
            (Some(header), Some(list)) => {
                Some(TrustedProxies::new(&header, &list).map_err(|e| {
                    let option = if e.value == header {
                        "--trusted-proxy-header"
                    } else {
                        "--trusted-proxies"
                    };
                    invalid(option, &e.value, e.expected)
                })?)
            }
            (Some(_), None) => {
                return Err(CliError::Requires {
                    option: "--trusted-proxy-header".into(),
                    needs:
                        "--trusted-proxies (the addresses of the proxies whose header is believed)",
                })
            }
            (None, Some(_)) => return Err(CliError::Requires {
                option: "--trusted-proxies".into(),
                needs:
                    "--trusted-proxy-header (the header those proxies set, e.g. x-forwarded-for)",
            }),
        };
        Ok(Command::Run(Box::new(config)))
    }
}

fn count(name: &str, value: String) -> Result<usize, CliError> {
    value
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| invalid(name, &value, "a positive integer"))
}

fn seconds(name: &str, value: String) -> Result<Duration, CliError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| invalid(name, &value, "a positive number of seconds"))
}

fn invalid(name: &str, value: &str, expected: &'static str) -> CliError {
    CliError::Invalid {
        option: name.to_owned(),
        value: value.to_owned(),
        expected,
    }
}

/// What the command line asks for.
#[derive(Clone, Debug)]
pub enum Command {
    /// Run the gateway.
    Run(Box<Config>),
    /// Print [`USAGE`].
    Help,
}

/// A command line that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CliError {
    /// An option nobody knows.
    Unknown(String),
    /// An option without its value.
    MissingValue(String),
    /// A value of the wrong shape.
    Invalid {
        /// The option.
        option: String,
        /// What was given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A positional argument (the gateway takes none).
    Unexpected(String),
    /// The `--config` file could not be read or is invalid.
    File(ConfigFileError),
    /// An option given without the one it works with.
    Requires {
        /// The option given.
        option: String,
        /// The option missing, and what it is for.
        needs: &'static str,
    },
    /// Two options that exclude each other.
    Conflict(&'static str, &'static str),
    /// A path option naming something the gateway cannot use (`--files` naming a file, a folder that cannot be
    /// created).
    Path {
        /// The option.
        option: &'static str,
        /// The path given.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Unknown(name) => write!(f, "unknown option `{name}` (see --help)"),
            CliError::MissingValue(name) => write!(f, "option `{name}` needs a value"),
            CliError::Invalid {
                option,
                value,
                expected,
            } => write!(
                f,
                "invalid value `{value}` for `{option}`: expected {expected}"
            ),
            CliError::Unexpected(arg) => write!(f, "unexpected argument `{arg}` (see --help)"),
            CliError::File(e) => write!(f, "{e}"),
            CliError::Requires { option, needs } => {
                write!(f, "option `{option}` needs {needs}")
            }
            CliError::Conflict(a, b) => write!(f, "`{a}` and `{b}` exclude each other"),
            CliError::Path {
                option,
                path,
                reason,
            } => write!(f, "{option} {}: {reason}", path.display()),
        }
    }
}

impl std::error::Error for CliError {}

/// The `--help` text.
pub const USAGE: &str = "\
tower-chat gateway: an OpenAI-compatible endpoint (POST /v1/chat/completions) running the tower-chat stack

usage: tower-chat-gateway [options]
       (from a checkout: cargo run --release --example gateway -- [options])

  --listen ADDR            address to listen on (default 127.0.0.1:8080)
  --demo                   offline: an in-process scripted upstream answers every model (no key,
                           no network); ask it to add two numbers to see a tool round
  --upstream URL           provider base URL, e.g. https://api.openai.com/v1 or http://127.0.0.1:9000/v1
  --provider NAME          openai | anthropic (default openai)
  --upstream-key-env VAR   environment variable holding the upstream key
                           (default OPENAI_API_KEY, or ANTHROPIC_API_KEY); refused at start if
                           unset, empty, or not a key a header can carry
  --no-upstream-key        the upstream takes no key (local vLLM, Ollama): no auth header is sent
  --db PATH                SQLite file of the persistence layer (default gateway.db)
  --database-url URL       PostgreSQL instead of SQLite
  --files DIR              enables read_file / write_file, confined to DIR (default: no file tools);
                           a missing DIR is created at start
  --api-keys-file PATH     clients must send `Authorization: Bearer <key>` with a key listed in PATH
  --operator-keys-file PATH  operators' keys (same format, none shared with client keys): they decide
                           pending approvals with POST /v1/approvals/{id}/decision; while set, only
                           operators may approve (clients may still deny); clients wait with
                           GET /v1/approvals/{id}?wait=SECS and resend the conversation to resume;
                           operators also log in to the web console at /console with their key
  --no-console             do not serve the operator console (/console)
  --trusted-proxy-header NAME  with --trusted-proxies: the header (x-forwarded-for, forwarded,
                           x-real-ip, ...) that gives the client address; the failed-login limit of
                           the operator API and console counts that address instead of the proxy's
  --trusted-proxies LIST   the proxies whose header is believed: comma-separated addresses and
                           ranges (127.0.0.1,10.0.0.0/8); from any other peer the header is ignored
  --allowed-hosts LIST     Host values the API answers, comma-separated NAME or NAME:PORT (a NAME
                           alone: any port), or `*` for any; others get 403 host_not_allowed, as do
                           browsers' cross-site requests (Sec-Fetch-Site: cross-site, or an Origin
                           not in the list). Default without --api-keys-file: the listen address and
                           localhost, 127.0.0.1, [::1] at its port; with --api-keys-file: any
  --max-rounds N           tool-loop limit (default 10)
  --body-limit BYTES       larger request bodies get 413, not counting base64 media (default 4194304)
  --max-messages N         messages (and tool calls) in one request (default 1024)
  --max-tools N            client tools in one request (default 128)
  --max-schema-bytes N     client tools' names, descriptions and schemas together (default 262144)
  --max-approvals N        approval decisions in one request (default 64)
  --max-id-bytes N         longest tool call id, tool name or approval id (default 256)
  --max-media-part-bytes N one image, audio clip or file, decoded (default 20971520)
  --max-media-bytes N      all media parts of one request, decoded (default 33554432)
  --header-timeout SECS    from a request's first byte to its complete head (default 10)
  --body-timeout SECS      from a request's head to the end of its body, else 408 (default 30)
  --idle-timeout SECS      a connection with no request in flight and no response being written is
                           closed after this (default 60)
  --write-timeout SECS     a response the client stops reading is dropped, and its connection closed,
                           once no byte of it could be written for this long (default 30)
  --max-connections N      open connections; more get 503 and are closed (default 16384, lowered to
                           what the open-files limit allows)
  --max-in-flight N        requests in flight, streams included; more get 503 + Retry-After (default 4096)
  --max-in-flight-per-key N  requests in flight per gateway key; more get 429 + Retry-After (default 256)
  --shutdown-timeout SECS  drain time for in-flight requests on SIGTERM / Ctrl-C (default 30)
  --upstream-timeout SECS  upstream first-byte and idle timeout (default 120)
  --approval-ttl SECS      how long a paused write_file waits for approval (default 3600)
  --max-polls-per-key N    GET /v1/approvals/{id}?wait= long-polls waiting at once per gateway key;
                           more get 429 + Retry-After (default 16)
  --config PATH            TOML configuration file (see the README); refused at start if invalid.
                           [upstreams]: models -> fallback targets (provider = openai,
                           openai-responses, anthropic, azure, gemini, vertex or bedrock; model,
                           base_url, region, key_env, deployments with weights), [upstreams.retry],
                           [upstreams.breaker], [upstreams.timeouts]; each target or deployment names
                           its credential (key_env, key_file, token_env, credentials_file,
                           credentials_env, aws_env, aws_profile), or says no_key = true. On SIGHUP the file is read again and a valid
                           [upstreams] replaces the running one (requests in flight finish on the old);
                           an invalid file is logged and the running configuration kept
  --metrics-listen ADDR    serve GET /metrics on this address only (default: on --listen)
  --metrics-key-env VAR    GET /metrics requires `Authorization: Bearer <key>`, the key read from VAR
                           (refused at start when VAR is unset or empty; default: no key)
  --record-content         telemetry spans carry message contents, tool arguments and results
                           (also OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true); off by default

Log level: RUST_LOG (default info).

OpenTelemetry (off unless an endpoint is set): OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 exports
the `chat {model}` spans (with their `execute_tool` children) and the GenAI metrics over OTLP/HTTP
(protobuf), flushed at shutdown. Also read: OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT,
OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_SERVICE_NAME (default tower-chat-gateway),
OTEL_RESOURCE_ATTRIBUTES, OTEL_{TRACES,METRICS}_EXPORTER=none, OTEL_METRIC_EXPORT_INTERVAL.
";

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, CliError> {
        match Config::parse(args.iter().copied())? {
            Command::Run(config) => Ok(*config),
            Command::Help => panic!("help"),
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = run(&[]).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.upstream, "https://api.openai.com/v1");
        assert_eq!(config.key_env(), "OPENAI_API_KEY");
        assert_eq!(config.db, PathBuf::from("gateway.db"));
        assert_eq!(config.max_rounds, 10);
        assert_eq!(config.files, None, "no file tools unless --files is given");
        let anthropic = run(&["--provider", "anthropic"]).unwrap();
        assert_eq!(anthropic.key_env(), "ANTHROPIC_API_KEY");
        assert_eq!(anthropic.upstream, "https://api.anthropic.com/v1");
    }

    #[test]
    fn every_option_is_read_in_both_spellings() {
        let config = run(&[
            "--listen=0.0.0.0:9",
            "--upstream",
            "http://127.0.0.1:9000/v1",
            "--upstream-key-env",
            "MY_KEY",
            "--db",
            "x.db",
            "--database-url=postgres://u@h/db",
            "--files",
            "/srv",
            "--api-keys-file",
            "keys.txt",
            "--operator-keys-file",
            "ops.txt",
            "--max-rounds",
            "3",
            "--body-limit",
            "100",
            "--shutdown-timeout",
            "0.5",
            "--max-messages=5",
            "--max-tools=6",
            "--max-schema-bytes=7",
            "--max-media-part-bytes=10",
            "--max-media-bytes=11",
            "--max-approvals=8",
            "--max-id-bytes=9",
            "--header-timeout=1",
            "--body-timeout=2",
            "--idle-timeout=3",
            "--write-timeout=4",
            "--max-polls-per-key=7",
            "--max-connections=4",
            "--max-in-flight=5",
            "--max-in-flight-per-key=6",
            "--metrics-listen=127.0.0.1:9090",
            "--metrics-key-env",
            "METRICS_KEY",
            "--allowed-hosts=gw.example.com,localhost:8080",
            "--trusted-proxy-header",
            "X-Forwarded-For",
            "--trusted-proxies=127.0.0.1,10.0.0.0/8",
        ])
        .unwrap();
        assert_eq!(
            config.trusted_proxies,
            Some(TrustedProxies::new("x-forwarded-for", "127.0.0.1,10.0.0.0/8").unwrap())
        );
        assert_eq!(
            config.allowed_hosts,
            Some(AllowedHosts::parse("gw.example.com,localhost:8080").unwrap())
        );
        assert_eq!(config.listen.port(), 9);
        assert_eq!(config.metrics_listen.map(|a| a.port()), Some(9090));
        assert_eq!(config.metrics_key_env.as_deref(), Some("METRICS_KEY"));
        assert_eq!(config.upstream, "http://127.0.0.1:9000/v1");
        assert_eq!(config.key_env(), "MY_KEY");
        assert_eq!(config.database_url.as_deref(), Some("postgres://u@h/db"));
        assert_eq!(config.files, Some(PathBuf::from("/srv")));
        assert_eq!(config.operator_keys_file, Some(PathBuf::from("ops.txt")));
        assert_eq!(config.max_rounds, 3);
        assert_eq!(config.body_limit, 100);
        assert_eq!(config.shutdown_timeout, Duration::from_millis(500));
        assert_eq!(config.max_polls_per_key, 7);
        assert_eq!(
            config.connections,
            ConnectionLimits {
                header_timeout: Duration::from_secs(1),
                body_timeout: Duration::from_secs(2),
                idle_timeout: Duration::from_secs(3),
                write_timeout: Duration::from_secs(4),
                max_connections: 4,
                max_in_flight: 5,
                max_in_flight_per_key: 6,
            }
        );
        assert_eq!(
            config.limits,
            RequestLimits {
                max_messages: 5,
                max_tools: 6,
                max_schema_bytes: 7,
                max_approvals: 8,
                max_id_bytes: 9,
                max_media_part_bytes: 10,
                max_media_bytes: 11,
                ..RequestLimits::default()
            }
        );
    }

    #[test]
    fn bad_command_lines_are_typed_errors() {
        assert_eq!(
            run(&["--nope"]).unwrap_err(),
            CliError::Unknown("--nope".into())
        );
        assert_eq!(
            run(&["--listen"]).unwrap_err(),
            CliError::MissingValue("--listen".into())
        );
        assert!(matches!(
            run(&["--provider", "cohere"]).unwrap_err(),
            CliError::Invalid { .. }
        ));
        assert!(matches!(
            run(&["--max-rounds", "0"]).unwrap_err(),
            CliError::Invalid { .. }
        ));
        assert!(matches!(
            run(&["--allowed-hosts", "http://gw.example.com"]).unwrap_err(),
            CliError::Invalid { option, .. } if option == "--allowed-hosts"
        ));
        assert!(matches!(
            run(&["--trusted-proxy-header", "x-forwarded-for"]).unwrap_err(),
            CliError::Requires { option, .. } if option == "--trusted-proxy-header"
        ));
        assert!(matches!(
            run(&["--trusted-proxies", "10.0.0.1"]).unwrap_err(),
            CliError::Requires { option, .. } if option == "--trusted-proxies"
        ));
        assert_eq!(
            run(&[
                "--trusted-proxy-header=x-forwarded-for",
                "--trusted-proxies=10.0.0.1,proxy"
            ])
            .unwrap_err(),
            CliError::Invalid {
                option: "--trusted-proxies".into(),
                value: "proxy".into(),
                expected: "an IP address or a range like 10.0.0.0/8",
            }
        );
        assert!(matches!(
            run(&["--trusted-proxy-header=x forwarded", "--trusted-proxies=10.0.0.1"]).unwrap_err(),
            CliError::Invalid { option, .. } if option == "--trusted-proxy-header"
        ));
        assert_eq!(
            run(&["stray"]).unwrap_err(),
            CliError::Unexpected("stray".into())
        );
        assert!(matches!(Config::parse(["--help"]), Ok(Command::Help)));
    }

    #[test]
    fn no_upstream_key_is_a_switch_that_excludes_a_key_variable() {
        let config = run(&[]).unwrap();
        assert!(!config.no_upstream_key);
        assert_eq!(
            config.key_source(),
            crate::upstream_key::KeySource::Env("OPENAI_API_KEY")
        );
        let keyless = run(&["--no-upstream-key"]).unwrap();
        assert_eq!(keyless.key_source(), crate::upstream_key::KeySource::None);
        assert_eq!(
            run(&["--no-upstream-key", "--upstream-key-env", "K"]).unwrap_err(),
            CliError::Conflict("--no-upstream-key", "--upstream-key-env")
        );
        assert!(matches!(
            run(&["--no-upstream-key=yes"]).unwrap_err(),
            CliError::Invalid { .. }
        ));
    }

    #[test]
    fn record_content_is_a_switch() {
        assert!(!run(&[]).unwrap().record_content || crate::telemetry::content_capture_from_env());
        assert!(run(&["--record-content"]).unwrap().record_content);
        assert!(run(&[]).unwrap().console);
        assert!(!run(&["--no-console"]).unwrap().console);
        assert!(matches!(
            run(&["--record-content=yes"]).unwrap_err(),
            CliError::Invalid { .. }
        ));
    }

    #[test]
    fn a_config_file_is_read_and_a_bad_one_refused() {
        let dir = std::env::temp_dir().join(format!("tc-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(&good, "# nothing yet\n").unwrap();
        let config = run(&["--config", good.to_str().unwrap()]).unwrap();
        assert_eq!(config.file, ConfigFile::default());
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[unknown]\n").unwrap();
        let err = run(&["--config", bad.to_str().unwrap()]).unwrap_err();
        assert!(
            matches!(&err, CliError::File(e) if e.line() == Some(1)),
            "{err}"
        );
        assert!(err.to_string().contains("bad.toml"), "{err}");
    }
}
