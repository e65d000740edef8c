//! The coding agents people run, unmodified, against the gateway in front of each upstream kind (Anthropic,
//! OpenAI Chat, OpenAI Responses, Azure OpenAI, Gemini, Gemini on Vertex AI, Bedrock): Claude Code reads a file with its own `Read` tool, Codex
//! runs a command with its shell tool and applies a patch with `apply_patch`, the OpenAI Agents SDK calls a
//! function tool. Each upstream is a scripted server on loopback that checks what the real API checks
//! (`upstream.rs`) and scripts the model's turns; each agent must finish with exit code 0 and the expected text.
//!
//! The agents come from `real_agents/npm` (`npm ci`, versions pinned by its lockfile) and the `openai-agents`
//! Python package, both installed by `.ci/run`. Without them a test skips visibly, and fails when `CI` is set.
//! The agents' telemetry and update checks are off, their HOME is a temporary directory, proxies are cleared,
//! and the scripted servers refuse any `Host` but their loopback address.

#[path = "../common/mod.rs"]
mod common;

mod agents_sdk;
mod claude_code;
mod codex;
mod upstream;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_testkit::process::ProcessGroup;

use common::kinds::KindUpstreams;
use common::Harness;
use upstream::Model;

/// The key agents present to the gateway.
pub const GATEWAY_KEY: &str = "sk-gateway-agents";

/// How long one agent run may take before the test fails (the agents answer in seconds here).
const AGENT_TIMEOUT: Duration = Duration::from_secs(120);

/// One agent binary from `real_agents/npm`, or `None` after a visible skip when it is not installed (a
/// failure when `CI` is set: CI never passes by skipping).
pub fn npm_agent(test: &str, name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/real_agents/npm/node_modules/.bin")
        .join(name);
    if path.exists() {
        return Some(path);
    }
    let reason =
        format!("`{name}` is not installed (npm ci --prefix gateway/tests/real_agents/npm)");
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {reason}, and CI is set"
    );
    eprintln!("SKIPPED {test}: {reason}");
    println!("SKIPPED {test}: {reason}");
    None
}

/// The scripted upstream of every kind, answered by one [`Model`], and gateways in front of them taking
/// [`GATEWAY_KEY`] and adding no tool of their own.
pub struct AgentGateway {
    pub upstreams: KindUpstreams,
    pub model: Model,
    keys: tempfile::NamedTempFile,
}

impl AgentGateway {
    pub async fn start(model: Model) -> AgentGateway {
        let handlers = model.clone();
        let upstreams = KindUpstreams::start(move |kind| {
            if upstream::KINDS.contains(&kind) {
                handlers.handler(kind)
            } else {
                Box::new(|_, _| {
                    tower_chat::test_server::Reply::json(
                        500,
                        serde_json::json!({"error": "unused"}),
                    )
                })
            }
        })
        .await;
        let keys = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(keys.path(), format!("{GATEWAY_KEY}\n")).unwrap();
        AgentGateway {
            upstreams,
            model,
            keys,
        }
    }

    /// A gateway routing models as `[upstreams]` in `toml` says.
    pub async fn gateway(&self, toml: &str) -> Harness {
        let file = ConfigFile::parse(toml, "gateway.toml").expect("valid config");
        let keys_path = self.keys.path().to_owned();
        Harness::start(
            |_, _| {
                tower_chat::test_server::Reply::json(
                    500,
                    serde_json::json!({"error": "the --upstream is unused"}),
                )
            },
            move |config| {
                config.file = file;
                config.api_keys_file = Some(keys_path);
                // Agents bring their own tools: the gateway adds none.
                config.add_tool = false;
                config.files = None;
            },
        )
        .await
    }

    /// A gateway with one model per kind, `m-<kind>`.
    pub async fn every_kind(&self) -> Harness {
        self.gateway(&self.upstreams.toml()).await
    }

    /// A gateway routing `name` to `kind`'s upstream.
    pub async fn one_kind(&self, name: &str, kind: &str) -> Harness {
        let toml = format!(
            "[upstreams.retry]\nmax_attempts = 1\n\n[[upstreams.models]]\nname = \"{name}\"\n\n{}",
            self.upstreams.target(kind)
        );
        self.gateway(&toml).await
    }

    /// Panic with every refusal the upstreams answered and every request they saw, if any was refused; and
    /// unless the reasoning of each kind that has it came back with a tool's result at least `rounds` times.
    pub fn assert_no_complaints(&self, rounds: usize) {
        let complaints = self.model.complaints();
        assert!(
            complaints.is_empty(),
            "the upstreams refused requests: {complaints:#?}\nrequests:\n{}",
            self.model.log()
        );
        for kind in upstream::KINDS {
            if upstream::reasoning_token(kind).is_some() {
                assert!(
                    self.model.continued(kind) >= rounds,
                    "{kind}: the reasoning came back {} times, expected {rounds}\nrequests:\n{}",
                    self.model.continued(kind),
                    self.model.log()
                );
            }
        }
    }
}

/// A command for an agent: no inherited environment but `PATH`, HOME in `home`, no proxies.
pub fn agent_command(program: &Path, home: &Path) -> Command {
    let mut command = Command::new("timeout");
    command
        .arg("--kill-after=5")
        .arg(AGENT_TIMEOUT.as_secs().to_string())
        .arg(program)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TMPDIR", home)
        .env("LANG", "C.UTF-8")
        // Everything the agents reach is on loopback; a proxy would carry it elsewhere.
        .env("NO_PROXY", "*")
        .env("no_proxy", "*");
    command
}

/// Run `command` to its end in a process group of its own (killed with the test).
pub async fn run(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || {
        ProcessGroup::output(&mut command).expect("start the agent")
    })
    .await
    .unwrap()
}

/// The output, for a failing assertion's message.
pub fn describe(output: &Output) -> String {
    format!(
        "exit: {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
