//! What the gateway is configured with, as plain data: [`Config`], built from the options ([`crate::config::cli`]: the
//! command line, the environment and the `--config` file's `[gateway]` table) and the rest of the file
//! ([`ConfigFile`]). Knows nothing of the server: the stack ([`mod@crate::stack`]) and the router read it.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize as _;

use super::credential::KeySource;
use super::provider::Provider;
use super::upstreams::TargetSection;
use crate::config::cli::Flags;
use crate::config::connections::ConnectionLimits;
use crate::config::file::{ConfigFile, ConfigFileError};
use crate::config::hosts::AllowedHosts;
use crate::config::proxies::TrustedProxies;
use tower_chat_wire::limits::{RequestLimits, SettingNames};

/// The name of the single `--upstream`'s target, in errors and metrics.
pub const SINGLE_UPSTREAM: &str = "upstream";

/// Everything the gateway is configured with. Build one with [`Config::parse`] (the command line) or by hand
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
    /// ([`crate::stack::upstream_key`]).
    pub upstream_key_env: Option<String>,
    /// `--no-upstream-key`: the upstream takes no key (a local vLLM or Ollama); no auth header is sent. Not
    /// with `--upstream-key-env`.
    pub no_upstream_key: bool,
    /// `--db PATH`: SQLite file of the persistence layer (default `gateway.db`).
    pub db: PathBuf,
    /// `--database-url URL`: PostgreSQL instead of SQLite.
    pub database_url: Option<String>,
    /// `true` unless `--no-records`: every model round trip is recorded in the store (the call log, spend,
    /// the conversations `previous_response_id` and a paused approval resume). Off, the store still keeps
    /// approvals, managed keys and console sessions, and a request that needs a record is refused.
    pub record_calls: bool,
    /// `--retention-days N`: the store deletes calls older than N days, hourly ([`crate::stack::retention`]);
    /// `None` (the default) keeps every call.
    pub retention: Option<tower_chat_persistence::Retention>,
    /// `--files DIR`: root of the `read_file` / `write_file` tools. `None` (the default): no file tools at all.
    /// The program creates a missing folder at start ([`Config::prepare_files`]).
    pub files: Option<PathBuf>,
    /// `--demo`: no provider is called; an in-process scripted upstream ([`crate::stack::demo`]) answers every model,
    /// so the gateway works with no key and no network. Not with `--upstream`, `--provider`,
    /// `--upstream-key-env`, `--no-upstream-key` or `[upstreams]`.
    pub demo: bool,
    /// `--add-tool` (on with `--demo`): offer the gateway's own `add` tool. Off by default: the model sees
    /// exactly the client's tools.
    pub add_tool: bool,
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
    /// limit counts the client address the header reports, not the proxy's (see [`crate::edge::client_addr`]).
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
    /// `true` unless `--no-tracing`: the stack's tracing layer spans every call and counts it for
    /// `GET /metrics` and OTLP. Off, neither sees a chat call; with `record_calls` off as well the gateway is a
    /// plain proxy (what `gateway/benches/load.rs` measures as `LOAD_PROFILE=proxy`).
    pub trace_calls: bool,
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
            record_calls: true,
            retention: None,
            files: None,
            demo: false,
            add_tool: false,
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
            // A client over a limit is told the flag that raises it.
            limits: RequestLimits {
                setting_names: SettingNames::Flags,
                ..RequestLimits::default()
            },
            connections: ConnectionLimits::default(),
            file: ConfigFile::default(),
            config_path: None,
            record_content: false,
            trace_calls: true,
            metrics_listen: None,
            metrics_key_env: None,
            otel_metrics: None,
        }
    }

    /// The environment variable the upstream key is read from: `--upstream-key-env`, else the provider's
    /// default (`None` for a provider whose credential is not a key).
    pub fn key_env(&self) -> Option<&str> {
        self.upstream_key_env
            .as_deref()
            .or(self.provider.default_key_env())
    }

    /// Where the single `--upstream`'s key comes from: nowhere with `--no-upstream-key`, else [`Config::key_env`].
    pub fn key_source(&self) -> Option<KeySource<'_>> {
        if self.no_upstream_key {
            Some(KeySource::None)
        } else {
            self.key_env().map(KeySource::Env)
        }
    }

    /// The single `--upstream` as the `[upstreams]` target it stands for: `--provider`, the URL, the key, and
    /// `model = "*"` (the client's model passes through). It is read by the same code as a target of the file,
    /// so it takes the same checks; a kind that needs settings the command line has no flag for (a Vertex AI
    /// project, a Bedrock region) is refused here.
    pub fn upstream_target(&self) -> Result<TargetSection, String> {
        if self.no_upstream_key && self.upstream_key_env.is_some() {
            return Err("--no-upstream-key and --upstream-key-env exclude each other".to_owned());
        }
        let mut table = toml::Table::new();
        table.insert("name".into(), SINGLE_UPSTREAM.into());
        table.insert("provider".into(), self.provider.as_str().into());
        table.insert("model".into(), "*".into());
        // No URL: the kind's own (none for kinds whose host comes from their settings).
        if !self.upstream.is_empty() {
            table.insert("base_url".into(), self.upstream.clone().into());
        }
        match self.key_source() {
            Some(KeySource::None) => table.insert("no_key".into(), true.into()),
            Some(KeySource::Env(variable)) => table.insert("key_env".into(), variable.into()),
            Some(KeySource::File(_)) | None => None,
        };
        TargetSection::deserialize(toml::Value::Table(table)).map_err(|e| {
            format!(
                "--provider {} --upstream {}: {}",
                self.provider,
                self.upstream,
                e.message()
            )
        })
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

    /// Parse command-line arguments (without the program name), read `--config` and put the flags and their
    /// environment variables over the file's `[gateway]` table, then the defaults under both.
    pub fn parse<I, S>(args: I) -> Result<Command, CliError>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let program = std::iter::once(std::ffi::OsString::from("tower-chat-gateway"));
        let parsed = Flags::command()
            .try_get_matches_from(program.chain(args.into_iter().map(Into::into)))
            .and_then(|matches| Ok((Flags::from_arg_matches(&matches)?, matches)));
        let (flags, matches) = match parsed {
            Ok(parsed) => parsed,
            Err(e) => {
                return match e.kind() {
                    clap::error::ErrorKind::DisplayHelp
                    | clap::error::ErrorKind::DisplayVersion => {
                        Ok(Command::Help(e.render().to_string()))
                    }
                    _ => Err(CliError::Usage(e.render().to_string())),
                }
            }
        };
        let file = match &flags.config {
            Some(path) => ConfigFile::load(path).map_err(CliError::File)?,
            None => ConfigFile::default(),
        };
        let config_path = flags.config.clone();
        let flags = flags.over(file.gateway.clone(), |id| Flags::given_in(&matches, id));
        let mut config = Config::from_flags(flags, file)?;
        config.config_path = config_path;
        Ok(Command::Run(Box::new(config)))
    }

    /// The configuration `flags` (already merged over the file's `[gateway]`) describe, with the rest of
    /// `file`; the defaults of [`Config::new`] where neither says. Checks what no single option can: pairs
    /// that exclude or need each other.
    pub fn from_flags(flags: Flags, file: ConfigFile) -> Result<Config, CliError> {
        let provider_given = flags.provider.is_some();
        let mut config = Config::new("");
        let defaults = config.clone();
        let count = |value: Option<crate::config::cli::Count>, default: usize| {
            value.map_or(default, |n| n.get())
        };
        let seconds = |value: Option<crate::config::cli::Seconds>, default: Duration| {
            value.map_or(default, |s| s.get())
        };
        config.listen = flags.listen.unwrap_or(defaults.listen);
        config.provider = flags.provider.unwrap_or(defaults.provider);
        config.upstream = flags
            .upstream
            .clone()
            .or_else(|| config.provider.default_base_url().map(str::to_owned))
            .unwrap_or_default();
        config.upstream_key_env = flags.upstream_key_env.clone();
        config.no_upstream_key = flags.no_upstream_key;
        config.db = flags.db.unwrap_or(defaults.db);
        config.database_url = flags.database_url;
        config.retention = flags
            .retention_days
            .map(|days| {
                u32::try_from(days.get())
                    .ok()
                    .and_then(|days| tower_chat_persistence::Retention::days(days).ok())
                    .ok_or_else(|| {
                        invalid(
                            "--retention-days",
                            &days.get().to_string(),
                            "a number of days from 1",
                        )
                    })
            })
            .transpose()?;
        config.files = flags.files;
        config.demo = flags.demo;
        config.add_tool = flags.add_tool || flags.demo;
        config.api_keys_file = flags.api_keys_file;
        config.operator_keys_file = flags.operator_keys_file;
        config.console = !flags.no_console;
        config.allowed_hosts = flags
            .allowed_hosts
            .as_deref()
            .map(|v| {
                AllowedHosts::parse(v).map_err(|_| {
                    invalid(
                        "--allowed-hosts",
                        v,
                        "a comma list of NAME or NAME:PORT (IPv6 in brackets), or `*` for any host",
                    )
                })
            })
            .transpose()?;
        config.max_rounds = count(flags.max_rounds, defaults.max_rounds);
        config.body_limit = count(flags.body_limit, defaults.body_limit);
        config.shutdown_timeout = seconds(flags.shutdown_timeout, defaults.shutdown_timeout);
        config.upstream_timeout = seconds(flags.upstream_timeout, defaults.upstream_timeout);
        config.approval_ttl = seconds(flags.approval_ttl, defaults.approval_ttl);
        config.max_polls_per_key = count(flags.max_polls_per_key, defaults.max_polls_per_key);
        let limits = &mut config.limits;
        limits.max_messages = count(flags.max_messages, limits.max_messages);
        limits.max_tools = count(flags.max_tools, limits.max_tools);
        limits.max_schema_bytes = count(flags.max_schema_bytes, limits.max_schema_bytes);
        limits.max_approvals = count(flags.max_approvals, limits.max_approvals);
        limits.max_id_bytes = count(flags.max_id_bytes, limits.max_id_bytes);
        limits.max_media_part_bytes =
            count(flags.max_media_part_bytes, limits.max_media_part_bytes);
        limits.max_media_bytes = count(flags.max_media_bytes, limits.max_media_bytes);
        let connections = &mut config.connections;
        connections.header_timeout = seconds(flags.header_timeout, connections.header_timeout);
        connections.body_timeout = seconds(flags.body_timeout, connections.body_timeout);
        connections.idle_timeout = seconds(flags.idle_timeout, connections.idle_timeout);
        connections.write_timeout = seconds(flags.write_timeout, connections.write_timeout);
        connections.max_connections = count(flags.max_connections, connections.max_connections);
        connections.max_in_flight = count(flags.max_in_flight, connections.max_in_flight);
        connections.max_in_flight_per_key = count(
            flags.max_in_flight_per_key,
            connections.max_in_flight_per_key,
        );
        connections.max_media_in_flight =
            count(flags.max_media_in_flight, connections.max_media_in_flight);
        config.record_content = flags.record_content || content_capture_from_env();
        config.record_calls = !flags.no_records;
        config.trace_calls = !flags.no_tracing;
        config.metrics_listen = flags.metrics_listen;
        config.metrics_key_env = flags.metrics_key_env;
        if config.no_upstream_key && config.upstream_key_env.is_some() {
            return Err(CliError::Conflict(
                "--no-upstream-key",
                "--upstream-key-env",
            ));
        }
        if config.demo {
            let conflict = if flags.upstream.is_some() {
                Some("--upstream")
            } else if provider_given {
                Some("--provider")
            } else if config.upstream_key_env.is_some() {
                Some("--upstream-key-env")
            } else if config.no_upstream_key {
                Some("--no-upstream-key")
            } else if !file.upstreams.models.is_empty() {
                Some("[upstreams] in --config")
            } else {
                None
            };
            if let Some(other) = conflict {
                return Err(CliError::Conflict("--demo", other));
            }
        }
        config.trusted_proxies = match (flags.trusted_proxy_header, flags.trusted_proxies) {
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
        if !config.demo && file.upstreams.models.is_empty() {
            config.upstream_target().map_err(CliError::Upstream)?;
        }
        config.file = file;
        Ok(config)
    }

    /// The `--help` text.
    pub fn help() -> String {
        use clap::CommandFactory as _;
        Flags::command().render_long_help().to_string()
    }
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
    /// Print this text (`--help`, `--version`) and stop.
    Help(String),
}

/// A command line that could not be parsed, or options that cannot be used together. Every one is a usage
/// error: the program exits with code 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CliError {
    /// What clap refused (an unknown option, a missing or malformed value, a stray argument), as clap words it.
    Usage(String),
    /// A value of the wrong shape.
    Invalid {
        /// The option.
        option: String,
        /// What was given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
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
    /// `--provider`, `--upstream` and the key options do not describe an upstream the gateway can call (a kind
    /// that needs settings only an `[upstreams]` target can give, a URL that is not http(s)).
    Upstream(String),
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
            // clap's own rendering starts with `error: `, which the program prints in front of every error.
            CliError::Usage(message) => {
                write!(f, "{}", message.trim_end().trim_start_matches("error: "))
            }
            CliError::Invalid {
                option,
                value,
                expected,
            } => write!(
                f,
                "invalid value `{value}` for `{option}`: expected {expected}"
            ),
            CliError::File(e) => write!(f, "{e}"),
            CliError::Requires { option, needs } => {
                write!(f, "option `{option}` needs {needs}")
            }
            CliError::Conflict(a, b) => write!(f, "`{a}` and `{b}` exclude each other"),
            CliError::Upstream(reason) => f.write_str(reason),
            CliError::Path {
                option,
                path,
                reason,
            } => write!(f, "{option} {}: {reason}", path.display()),
        }
    }
}

impl std::error::Error for CliError {}

/// `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (the OpenTelemetry GenAI instrumentations'
/// switch): record message contents as `--record-content` does.
pub(crate) fn content_capture_from_env() -> bool {
    std::env::var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

#[cfg(test)]
mod tests;
