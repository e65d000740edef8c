//! Claude Code (`claude -p`) reads a file with its own `Read` tool and answers with what the file says.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::common::kinds::carries;
use crate::upstream::{Model, Turn, KINDS};
use crate::{agent_command, describe, npm_agent, run, AgentGateway, GATEWAY_KEY};

/// What the file holds: the model knows it only from the `Read` tool's result.
const NOTE: &str = "the-harbour-code-is-aurora-7342";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_reads_a_file_with_its_read_tool_over_every_upstream_kind() {
    const TEST: &str = "claude_code_reads_a_file_with_its_read_tool_over_every_upstream_kind";
    let Some(claude) = npm_agent(TEST, "claude") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let note = work.path().join("note.txt");
    std::fs::write(&note, format!("{NOTE}\n")).unwrap();
    let model = Model::default();
    let note_path = note.display().to_string();
    model.script(Arc::new(move |_, tools, request| {
        if !tools.iter().any(|t| t.name == "Read") {
            return None;
        }
        Some(if carries(request, NOTE) {
            Turn::Answer(format!("The note says: {NOTE}"))
        } else {
            Turn::Call {
                name: "Read".into(),
                arguments: json!({"file_path": note_path}),
            }
        })
    }));
    let agents = AgentGateway::start(model).await;
    let gateway = agents.every_kind().await;

    for kind in KINDS {
        let home = tempfile::tempdir().unwrap();
        let model_name = format!("m-{kind}");
        let mut command = agent_command(&claude, home.path());
        command
            .current_dir(work.path())
            .args(["-p", "What does note.txt say? Read it."])
            .args(["--output-format", "json", "--model", &model_name])
            .args(["--allowedTools", "Read"])
            .env("ANTHROPIC_BASE_URL", gateway.url(""))
            .env("ANTHROPIC_API_KEY", GATEWAY_KEY)
            // Side requests (titles, summaries) go to the small model: the same upstream.
            .env("ANTHROPIC_SMALL_FAST_MODEL", &model_name)
            .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", &model_name)
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        let output = run(command).await;
        let described = describe(&output);
        assert!(
            output.status.success(),
            "{kind}: {described}\nrequests:\n{}",
            agents.model.log()
        );
        let result: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{kind}: not JSON ({e}): {described}"));
        assert_eq!(result["is_error"], false, "{kind}: {described}");
        assert_eq!(
            result["result"].as_str(),
            Some(format!("The note says: {NOTE}").as_str()),
            "{kind}: {described}"
        );
    }
    agents.assert_no_complaints(1);
}
