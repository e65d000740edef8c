//! The OpenAI Agents SDK (Python), with its Responses model and its Chat Completions model, calls a function
//! tool of its own and answers with the tool's result (`agents_sdk_client.py`).

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use crate::common::kinds::carries;
use crate::upstream::{results, Model, Turn, KINDS};
use crate::{agent_command, describe, run, AgentGateway, GATEWAY_KEY};

/// What the client's tool answers (`SECRET` in the script).
const SECRET: &str = "the-secret-is-cobalt-4418";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_sdk_calls_a_function_tool_over_every_upstream_kind() {
    const TEST: &str = "agents_sdk_calls_a_function_tool_over_every_upstream_kind";
    if !tower_chat_testkit::python_package(TEST, "agents") {
        return;
    }
    let model = Model::default();
    model.script(Arc::new(move |kind, tools, request| {
        if !tools.iter().any(|t| t.name == "secret_word") {
            return None;
        }
        Some(match results(kind, &request.body) {
            0 => Turn::Call {
                name: "secret_word".into(),
                arguments: json!({"topic": "boats"}),
            },
            _ if carries(request, SECRET) => Turn::Answer(format!("The secret word is {SECRET}.")),
            _ => Turn::Answer("the tool's result did not come back".into()),
        })
    }));
    let agents = AgentGateway::start(model).await;
    let gateway = agents.every_kind().await;

    let home = tempfile::tempdir().unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_agents/agents_sdk_client.py");
    let mut command = agent_command(Path::new("python3"), home.path());
    command
        .arg(script)
        .arg(gateway.base_url())
        .arg(GATEWAY_KEY)
        .args(KINDS.map(|kind| format!("m-{kind}")))
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1");
    let output = run(command).await;
    let described = describe(&output);
    assert!(
        output.status.success(),
        "{described}\nrequests:\n{}",
        agents.model.log()
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for kind in KINDS {
        for api in ["responses", "chat"] {
            let line = format!("ok {api} m-{kind} The secret word is {SECRET}.");
            assert!(stdout.contains(&line), "missing {line:?}: {described}");
        }
    }
    agents.assert_no_complaints(2);
}
