//! The official Python clients against the gateway, so every wire format is checked by a parser nobody here
//! wrote: `openai` for Chat Completions (`tests/openai_client.py`, and over HTTP/2 `tests/openai_http2_client.py`)
//! and Responses (`tests/openai_responses_client.py`), `anthropic` for Messages (`tests/anthropic_client.py`). Each test skips
//! with a visible message when `python3` or its package is missing (`pip install openai anthropic`).

use crate::common;

use common::{wire_upstream, Harness};
use tower_chat::test_server::{RecordedRequest, Reply};

/// The shared wire-format upstream; `write` writes this file's own file.
fn upstream() -> impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static {
    wire_upstream(r#"{"path": "py.txt", "content": "py"}"#)
}

/// Run `script` with `package` against a gateway with a key file; assert it passed every check. Returns the
/// gateway (for checks of its files), or `None` after a visible skip.
async fn run_client(
    test: &str,
    package: &str,
    script: &str,
    base_url: impl Fn(&Harness) -> String,
    checks: &[&str],
) -> Option<Harness> {
    let keys = common::python_keys(test, package)?;
    let keys_path = keys.path().to_owned();
    let gw = Harness::start(upstream(), move |c| c.api_keys_file = Some(keys_path)).await;
    let args = [base_url(&gw), common::PYTHON_KEY.to_owned()];
    common::run_python(script, &args, checks).await;
    Some(gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_unmodified() {
    let Some(gw) = run_client(
        "the_official_openai_python_client_works_unmodified",
        "openai",
        "openai_client.py",
        Harness::base_url,
        &[
            "ok non-streaming text",
            "ok streaming text",
            "ok server-side tool round",
            "ok client tool handed back",
            "ok approval flow",
            "ok errors",
        ],
    )
    .await
    else {
        return;
    };
    assert_eq!(
        std::fs::read_to_string(gw.root().join("py.txt")).unwrap(),
        "py"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_anthropic_python_client_works_against_v1_messages() {
    let Some(gw) = run_client(
        "the_official_anthropic_python_client_works_against_v1_messages",
        "anthropic",
        "anthropic_client.py",
        // The SDK appends `/v1/messages` itself.
        |gw| gw.url(""),
        &[
            "ok non-streaming text",
            "ok streaming text",
            "ok server-side tool round",
            "ok client tool round",
            "ok approval flow",
            "ok errors",
        ],
    )
    .await
    else {
        return;
    };
    assert_eq!(
        std::fs::read_to_string(gw.root().join("py.txt")).unwrap(),
        "py"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_against_v1_responses() {
    run_client(
        "the_official_openai_python_client_works_against_v1_responses",
        "openai",
        "openai_responses_client.py",
        Harness::base_url,
        &[
            "ok non-streaming text",
            "ok streaming text",
            "ok function call round trip",
            "ok previous_response_id",
            "ok errors",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_streams_over_http2() {
    let test = "the_official_openai_python_client_streams_over_http2";
    // HTTP/2 in the Python client needs `h2` (`pip install 'httpx[http2]'`).
    if common::python_keys(test, "h2").is_none() {
        return;
    }
    run_client(
        test,
        "openai",
        "openai_http2_client.py",
        Harness::base_url,
        &[
            "ok non-streaming text",
            "ok streaming text",
            "ok every answer over HTTP/2",
        ],
    )
    .await;
}
