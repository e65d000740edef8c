//! `examples/embed.rs` served in-process, and the official `openai` Python client against it
//! (`tests/embed_client.py`): answers whole and streamed over the facade's stack, the format's 400, the app's
//! own 401 for a request without its token, and its own route beside the chat route.

// The example itself, so the test serves exactly the app it shows (its `main` is unused here).
#[allow(dead_code)]
#[path = "../embed.rs"]
mod embed;

use tower_chat::test_server::ScriptedProvider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_talks_to_the_embedded_route_behind_the_apps_own_auth() {
    let test = "the_official_openai_client_talks_to_the_embedded_route_behind_the_apps_own_auth";
    if !tower_chat_testkit::python_package(test, "openai") {
        return;
    }
    let provider = ScriptedProvider::start(embed::scripted_model).await;
    let token = "sk-embed-test";
    let app = embed::app(&provider.base_url(), token.to_owned()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    tower_chat_testkit::run_python(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/embed_client.py"),
        &[format!("http://{addr}/v1"), token.to_owned()],
        &[
            "ok non-streaming text",
            "ok streaming text",
            "ok format's 400",
            "ok app's 401",
            "ok app's own route",
        ],
    )
    .await;
}
