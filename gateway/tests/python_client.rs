//! The official OpenAI Python client against the gateway (`tests/openai_client.py`), so the wire format is
//! checked by a parser nobody here wrote. Skips with a visible message when `python3` or the `openai` package
//! is missing (`pip install openai`).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{tool_result, Harness};
use tower_chat::test_server::{Part, RecordedRequest, Reply};

fn upstream(req: &RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    let first_user = messages[0]["content"].as_str().unwrap_or_default();
    match first_user {
        "text" => Reply::openai_text("Hello from upstream"),
        "add" => match tool_result(messages, "call_add") {
            None => Reply::openai_tool_calls(&[("call_add", "add", r#"{"a": 2, "b": 3}"#)]),
            Some(sum) => Reply::openai_text(&format!("The sum is {sum}")),
        },
        "weather" => Reply::openai_tool_calls(&[("call_w", "get_weather", r#"{"city": "Oslo"}"#)]),
        "write" => match tool_result(messages, "call_write") {
            None => Reply::openai_tool_calls(&[(
                "call_write",
                "write_file",
                r#"{"path": "py.txt", "content": "py"}"#,
            )]),
            Some(result) => Reply::openai_text(&format!("written: {result}")),
        },
        "ratelimit" => Reply::json(429, serde_json::json!({"error": {"message": "slow down"}}))
            .header("retry-after", "3"),
        "abort" => Reply::sse_chunks([
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial \"}}]}\n\n",
        ])
        .then(Part::Pause(Duration::from_millis(20)))
        .then(Part::Abort),
        other => Reply::json(
            400,
            serde_json::json!({"error": {"message": format!("unscripted {other}")}}),
        ),
    }
}

fn python_with_openai() -> Result<(), String> {
    let output = Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .map_err(|e| format!("python3 is not available ({e})"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err("the `openai` Python package is not installed (pip install openai)".into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_unmodified() {
    if let Err(reason) = python_with_openai() {
        eprintln!("SKIPPED the_official_openai_python_client_works_unmodified: {reason}");
        println!("SKIPPED the_official_openai_python_client_works_unmodified: {reason}");
        return;
    }
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), "sk-python\n").unwrap();
    let keys_path = keys.path().to_owned();
    let gw = Harness::start(upstream, move |c| c.api_keys_file = Some(keys_path)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let base_url = gw.base_url();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([script, &base_url, "sk-python"])
            .output()
            .expect("run python3")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for check in [
        "ok non-streaming text",
        "ok streaming text",
        "ok server-side tool round",
        "ok client tool handed back",
        "ok approval flow",
        "ok errors",
    ] {
        assert!(stdout.contains(check), "missing `{check}` in:\n{stdout}");
    }
    assert_eq!(
        std::fs::read_to_string(gw.root().join("py.txt")).unwrap(),
        "py"
    );
}
