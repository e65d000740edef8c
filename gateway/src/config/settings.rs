//! What the gateway is configured with, as plain data: [`Config`], built from the options ([`crate::config::cli`]: the
//! command line, the environment and the `--config` file's `[gateway]` table) and the rest of the file
//! ([`ConfigFile`]). Knows nothing of the server: the stack ([`mod@crate::stack`]) and the router read it.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::provider::Provider;
use crate::api::request_size::{RequestLimits, SettingNames};
use crate::config::cli::Flags;
use crate::config::file::{ConfigFile, ConfigFileError};
use crate::edge::browser_guard::AllowedHosts;
use crate::edge::client_addr::TrustedProxies;
use crate::edge::in_flight::ConnectionLimits;

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
    pub fn key_source(&self) -> crate::stack::upstream_key::KeySource<'_> {
        if self.no_upstream_key {
            crate::stack::upstream_key::KeySource::None
        } else {
            crate::stack::upstream_key::KeySource::Env(self.key_env())
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
            .unwrap_or_else(|| config.provider.default_upstream().to_owned());
        config.upstream_key_env = flags.upstream_key_env.clone();
        config.no_upstream_key = flags.no_upstream_key;
        config.db = flags.db.unwrap_or(defaults.db);
        config.database_url = flags.database_url;
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
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, CliError> {
        match Config::parse(args.iter().copied())? {
            Command::Run(config) => Ok(*config),
            Command::Help(text) => panic!("help: {text}"),
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
            "--max-media-in-flight=12",
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
                max_media_in_flight: 12,
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
                setting_names: SettingNames::Flags,
                ..RequestLimits::default()
            }
        );
    }

    #[test]
    fn bad_command_lines_are_typed_errors() {
        for (args, needle) in [
            (&["--nope"][..], "--nope"),
            (&["--listen"][..], "--listen"),
            (&["--listen", "nowhere"][..], "--listen"),
            (&["--provider", "cohere"][..], "openai"),
            (&["--max-rounds", "0"][..], "positive integer"),
            (&["--shutdown-timeout=-1"][..], "positive number of seconds"),
            (&["stray"][..], "stray"),
        ] {
            match run(args).unwrap_err() {
                CliError::Usage(message) => {
                    assert!(message.contains(needle), "{args:?}: {message}")
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
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
        assert!(
            matches!(Config::parse(["--help"]), Ok(Command::Help(text)) if text.contains("--listen"))
        );
    }

    #[test]
    fn no_upstream_key_is_a_switch_that_excludes_a_key_variable() {
        let config = run(&[]).unwrap();
        assert!(!config.no_upstream_key);
        assert_eq!(
            config.key_source(),
            crate::stack::upstream_key::KeySource::Env("OPENAI_API_KEY")
        );
        let keyless = run(&["--no-upstream-key"]).unwrap();
        assert_eq!(
            keyless.key_source(),
            crate::stack::upstream_key::KeySource::None
        );
        assert_eq!(
            run(&["--no-upstream-key", "--upstream-key-env", "K"]).unwrap_err(),
            CliError::Conflict("--no-upstream-key", "--upstream-key-env")
        );
        assert!(matches!(
            run(&["--no-upstream-key=yes"]).unwrap_err(),
            CliError::Usage(_)
        ));
    }

    #[test]
    fn record_content_is_a_switch() {
        assert!(!run(&[]).unwrap().record_content || content_capture_from_env());
        assert!(run(&["--record-content"]).unwrap().record_content);
        assert!(run(&[]).unwrap().console);
        assert!(!run(&["--no-console"]).unwrap().console);
        assert!(matches!(
            run(&["--record-content=yes"]).unwrap_err(),
            CliError::Usage(_)
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

    #[test]
    fn the_file_gives_options_and_a_flag_overrides_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.toml");
        std::fs::write(
            &path,
            "[gateway]\nlisten = \"127.0.0.1:9100\"\nmax-rounds = 4\nno-console = true\n\
             trusted-proxy-header = \"x-forwarded-for\"\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let from_file = run(&["--config", path, "--trusted-proxies=10.0.0.1"]).unwrap();
        assert_eq!(from_file.listen.port(), 9100);
        assert_eq!(from_file.max_rounds, 4);
        assert!(!from_file.console);
        assert!(
            from_file.trusted_proxies.is_some(),
            "a pair may come half from the file"
        );
        let overridden = run(&[
            "--config",
            path,
            "--listen",
            "127.0.0.1:9200",
            "--max-rounds=6",
        ])
        .unwrap_err();
        assert!(
            matches!(&overridden, CliError::Requires { option, .. } if option == "--trusted-proxy-header"),
            "{overridden:?}"
        );
        let overridden = run(&[
            "--config",
            path,
            "--listen",
            "127.0.0.1:9200",
            "--max-rounds=6",
            "--trusted-proxies=10.0.0.1",
        ])
        .unwrap();
        assert_eq!(overridden.listen.port(), 9200);
        assert_eq!(overridden.max_rounds, 6);
        assert!(!overridden.console, "what no flag says stays the file's");
        assert_eq!(
            overridden.config_path.as_deref(),
            Some(std::path::Path::new(path))
        );
    }
}
