//! `read_file` through the whole gateway: reads inside `--files`, refuses every escape with an error result to
//! the model, and reads nothing outside.

use crate::common;

use common::{request, tool_result, Harness};
use serde_json::json;
use tower_chat::test_server::Reply;

const SECRET: &str = "TOP-SECRET-CONTENT";

/// A gateway whose model calls `read_file` with `path`, then answers; returns the tool result the model got.
async fn read_through_gateway(path: &str, setup: impl FnOnce(&std::path::Path)) -> String {
    let arguments = json!({"path": path}).to_string();
    let gw = Harness::start(
        move |_, index| match index {
            0 => Reply::openai_tool_calls(&[("call_read", "read_file", &arguments)]),
            _ => Reply::openai_text("done"),
        },
        |_| {},
    )
    .await;
    std::fs::write(gw.files.path().join("secret.txt"), SECRET).unwrap();
    setup(&gw.root());
    let answer = gw.chat(&request(false, "read it")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["choices"][0]["message"]["content"], "done");
    assert!(
        !answer.body.contains(SECRET),
        "the client never sees file content directly"
    );
    tool_result(&gw.upstream_messages(1), "call_read").expect("a tool result")
}

#[tokio::test]
async fn a_file_inside_the_root_is_read() {
    let result = read_through_gateway("notes/today.txt", |root| {
        std::fs::create_dir_all(root.join("notes")).unwrap();
        std::fs::write(root.join("notes/today.txt"), "buy milk").unwrap();
    })
    .await;
    assert_eq!(result, "buy milk");
}

#[tokio::test]
async fn dot_dot_escapes_are_refused() {
    for path in ["../secret.txt", "notes/../../secret.txt", "./../secret.txt"] {
        let result = read_through_gateway(path, |root| {
            std::fs::create_dir_all(root.join("notes")).unwrap();
        })
        .await;
        assert!(result.starts_with("error: refused:"), "{path}: {result}");
        assert!(!result.contains(SECRET));
    }
}

#[tokio::test]
async fn absolute_paths_are_refused() {
    let result = read_through_gateway("/etc/passwd", |_| {}).await;
    assert!(result.starts_with("error: refused:"), "{result}");
    assert!(!result.contains("root:"));
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_leading_outside_are_refused() {
    let result = read_through_gateway("link.txt", |root| {
        std::os::unix::fs::symlink(
            root.parent().unwrap().join("secret.txt"),
            root.join("link.txt"),
        )
        .unwrap();
    })
    .await;
    assert!(result.starts_with("error: refused:"), "{result}");
    assert!(!result.contains(SECRET));
    // A directory symlink is caught as well.
    let result = read_through_gateway("up/secret.txt", |root| {
        std::os::unix::fs::symlink(root.parent().unwrap(), root.join("up")).unwrap();
    })
    .await;
    assert!(result.contains("refused"), "{result}");
    assert!(!result.contains(SECRET));
}

/// No symlink is followed, not even one staying inside: resolution must not depend on what a link points to
/// at the moment of the call.
#[cfg(unix)]
#[tokio::test]
async fn symlinks_staying_inside_are_refused_too() {
    let result = read_through_gateway("alias.txt", |root| {
        std::fs::write(root.join("real.txt"), "real content").unwrap();
        std::os::unix::fs::symlink(root.join("real.txt"), root.join("alias.txt")).unwrap();
    })
    .await;
    assert!(result.starts_with("error: refused:"), "{result}");
}

/// Started without `--files`, the gateway offers no file tool at all (the upstream is never told about them).
#[tokio::test]
async fn without_files_there_are_no_file_tools() {
    let gw = Harness::start(
        |_, _| Reply::openai_text("done"),
        |config| config.files = None,
    )
    .await;
    let answer = gw.chat(&request(false, "hi")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = gw.provider.requests();
    let tools: Vec<String> = sent[0].body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(tools, vec!["add".to_owned()]);
}

/// With no server-side tool configured, the model sees exactly the client's tools, and the names the gateway's
/// own tools would take are the client's to use.
#[tokio::test]
async fn without_server_tools_the_model_sees_exactly_the_clients_tools() {
    let gw = Harness::start(
        |_, _| Reply::openai_text("done"),
        |config| {
            config.files = None;
            config.add_tool = false;
        },
    )
    .await;
    let function = |name: &str| json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}});
    let mut body = request(false, "hi");
    body["tools"] = json!([function("add"), function("read_file"), function("grep")]);
    let answer = gw.chat(&body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let sent = gw.provider.requests();
    let offered: Vec<&str> = sent[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["add", "read_file", "grep"]);
}

#[tokio::test]
async fn a_missing_file_is_an_error_result_without_the_servers_paths() {
    let result = read_through_gateway("nope.txt", |_| {}).await;
    assert!(result.contains("no such file"), "{result}");
    assert!(!result.contains("/tmp"), "{result}");
}
