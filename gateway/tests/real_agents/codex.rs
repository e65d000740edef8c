//! Codex CLI (`codex exec`, a model provider at the gateway with `wire_api = "responses"`) runs a command with
//! its shell tool, applies a patch with its freeform `apply_patch` tool, and answers.

use std::sync::Arc;

use serde_json::json;

use crate::common::kinds::carries;
use crate::upstream::{results, Model, Turn, KINDS};
use crate::{agent_command, describe, npm_agent, run, AgentGateway, GATEWAY_KEY};

/// What the file holds before the patch: the model knows it only from the shell command's output.
const BEFORE: &str = "colour = amber-5521";
/// The line the patch puts in its place.
const AFTER: &str = "colour = teal-9093";
const ANSWER: &str = "Patched notes.txt: amber-5521 is now teal-9093.";

/// A model name Codex knows (its own catalog gives it the freeform `apply_patch` tool and its hosted tools), as
/// a user's Codex sends it by default; the gateway routes it to the upstream under test.
const CODEX_MODEL: &str = "gpt-5.5";

/// The variable Codex reads the gateway key from (`env_key`).
const KEY_ENV: &str = "GATEWAY_KEY";

/// Codex's configuration: the gateway as its model provider; update checks and analytics off.
fn config(base_url: &str) -> String {
    format!(
        "model = \"{CODEX_MODEL}\"\nmodel_provider = \"gateway\"\n\
         check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n\n\
         [model_providers.gateway]\nname = \"tower-chat gateway\"\nbase_url = \"{base_url}\"\n\
         env_key = \"{KEY_ENV}\"\nwire_api = \"responses\"\n"
    )
}

fn patch() -> String {
    format!("*** Begin Patch\n*** Update File: notes.txt\n@@\n-{BEFORE}\n+{AFTER}\n*** End Patch\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]

async fn codex_runs_a_command_and_applies_a_patch_over_every_upstream_kind() {
    const TEST: &str = "codex_runs_a_command_and_applies_a_patch_over_every_upstream_kind";
    let Some(codex) = npm_agent(TEST, "codex") else {
        return;
    };
    let model = Model::default();
    model.script(Arc::new(move |kind, tools, request| {
        let patcher = tools.iter().find(|t| t.name == "apply_patch")?;
        Some(match results(kind, &request.body) {
            0 => Turn::Call {
                name: "exec_command".into(),
                arguments: json!({"cmd": "cat notes.txt"}),
            },
            1 if !carries(request, BEFORE) => {
                Turn::Answer("the command's output did not come back".into())
            }
            1 if patcher.freeform => Turn::Freeform {
                name: "apply_patch".into(),
                input: patch(),
            },
            // A freeform tool offered as a function takes its text in its one string parameter.
            1 => {
                let parameter = patcher.parameters["properties"]
                    .as_object()
                    .and_then(|p| p.keys().next().cloned())
                    .unwrap_or_else(|| "input".into());
                Turn::Call {
                    name: "apply_patch".into(),
                    arguments: json!({ parameter: patch() }),
                }
            }
            _ => Turn::Answer(ANSWER.into()),
        })
    }));
    let agents = AgentGateway::start(model).await;

    for kind in KINDS {
        let gateway = agents.one_kind(CODEX_MODEL, kind).await;
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), config(&gateway.base_url())).unwrap();
        std::fs::write(work.path().join("notes.txt"), format!("{BEFORE}\n")).unwrap();
        let mut command = agent_command(&codex, home.path());
        command
            .current_dir(work.path())
            .args(["exec", "--skip-git-repo-check"])
            // The test's own directory is the sandbox; the tools run as the test does.
            .arg("--dangerously-bypass-approvals-and-sandbox")
            .arg("Show notes.txt, then change its colour to teal-9093.")
            .env("CODEX_HOME", home.path())
            .env(KEY_ENV, GATEWAY_KEY);
        let output = run(command).await;
        let described = describe(&output);
        assert!(
            output.status.success(),
            "{kind}: {described}\nrequests:\n{}",
            agents.model.log()
        );
        assert!(
            String::from_utf8_lossy(&output.stdout).contains(ANSWER),
            "{kind}: {described}"
        );
        assert_eq!(
            std::fs::read_to_string(work.path().join("notes.txt")).unwrap(),
            format!("{AFTER}\n"),
            "{kind}: the patch was applied\n{described}"
        );
    }
    agents.assert_no_complaints(2);
}
