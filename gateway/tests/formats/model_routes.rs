//! `[upstreams]` names, aliases and patterns over HTTP in every inbound format: the model names agents send by
//! default reach a configured model (an exact name first, then the longest pattern), a `*` target passes the
//! client's name to the provider, and an unknown name is a 404 in the caller's format naming what is configured.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::Reply;
use tower_chat_gateway::config_file::ConfigFile;

use common::kinds::{text_reply, KindUpstreams};
use common::Harness;

/// `kind`'s target with the model the client names (`model = "*"`).
fn passing_names(upstreams: &KindUpstreams, kind: &str) -> String {
    let target = upstreams.target(kind);
    let fixed = target
        .lines()
        .find(|line| line.starts_with("model = "))
        .unwrap()
        .to_owned();
    target.replace(&fixed, "model = \"*\"")
}

async fn gateway() -> (KindUpstreams, Harness) {
    let upstreams = KindUpstreams::start(|kind| Box::new(move |_, _| text_reply(kind, "hi"))).await;
    let toml = format!(
        "[upstreams.retry]\nmax_attempts = 1\n\n\
         [[upstreams.models]]\nname = \"claude-*\"\n\n{}\n\
         [[upstreams.models]]\nname = \"gpt\"\naliases = [\"gpt-*\", \"o3\"]\n\n{}\n\
         [[upstreams.models]]\nname = \"mini\"\naliases = [\"gpt-4o-mini*\"]\n\n{}\n\
         [[upstreams.models]]\nname = \"gemini-*\"\n\n{}\n",
        passing_names(&upstreams, "anthropic"),
        upstreams.target("openai"),
        upstreams.target("openai-responses"),
        passing_names(&upstreams, "gemini"),
    );
    let file = ConfigFile::parse(&toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let gw = Harness::start(
        |_, _| Reply::json(500, json!({"error": "the --upstream is unused"})),
        |config| config.file = file,
    )
    .await;
    (upstreams, gw)
}

/// A request naming `model` in the format of `path`.
fn ask(path: &str, model: &str) -> Value {
    match path {
        "/v1/chat/completions" => {
            json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        }
        "/v1/messages" => {
            json!({"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
        }
        _ => json!({"model": model, "input": "hi"}),
    }
}

const PATHS: [&str; 3] = ["/v1/chat/completions", "/v1/messages", "/v1/responses"];

#[tokio::test]
async fn agents_default_model_names_reach_the_model_whose_name_or_longest_pattern_matches() {
    let (upstreams, gw) = gateway().await;
    // (the client's model, the kind it reaches, the model the provider is asked for)
    let cases = [
        (
            "claude-sonnet-4-5-20250929",
            "anthropic",
            "claude-sonnet-4-5-20250929",
        ),
        ("claude-haiku-4-5", "anthropic", "claude-haiku-4-5"),
        ("gpt-5-codex", "openai", "gpt-4o"),
        ("o3", "openai", "gpt-4o"),
        ("gpt", "openai", "gpt-4o"),
        // `gpt-4o-mini*` is longer than `gpt-*`.
        ("gpt-4o-mini-2024-07-18", "openai-responses", "gpt-5-mini"),
        ("gemini-2.5-pro", "gemini", "gemini-2.5-pro"),
    ];
    for path in PATHS {
        for (model, kind, sent) in cases {
            let before = upstreams.get(kind).server.requests().len();
            let answer = gw.post_json(path, &ask(path, model), &[]).await;
            assert_eq!(answer.status, 200, "{path} {model}: {}", answer.body);
            let requests = upstreams.get(kind).server.requests();
            assert_eq!(requests.len(), before + 1, "{path} {model} reaches {kind}");
            let request = requests.last().unwrap();
            match kind {
                // Gemini names the model in the path.
                "gemini" => assert!(
                    request.path.contains(&format!("/models/{sent}:")),
                    "{path} {model}: {}",
                    request.path
                ),
                _ => assert_eq!(request.body["model"], sent, "{path} {model}"),
            }
        }
    }
}

#[tokio::test]
async fn an_unknown_model_is_a_404_in_the_callers_format_naming_names_and_patterns() {
    let (upstreams, gw) = gateway().await;
    for path in PATHS {
        let answer = gw.post_json(path, &ask(path, "llama-3.3-70b"), &[]).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
        let body = answer.json();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("`llama-3.3-70b`"), "{path}: {body}");
        assert!(message.contains("gpt, mini, o3"), "{path}: {body}");
        assert!(
            message.contains("patterns: gpt-4o-mini*, claude-*, gemini-*, gpt-*"),
            "{path}: {body}"
        );
        if path == "/v1/messages" {
            assert_eq!(body["type"], "error", "{body}");
            assert_eq!(body["error"]["type"], "not_found_error", "{body}");
        } else {
            assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
            assert_eq!(body["error"]["code"], "model_not_found", "{body}");
        }
    }
    let reached: usize = upstreams
        .kinds
        .iter()
        .map(|k| k.server.requests().len())
        .sum();
    assert_eq!(reached, 0);
}

#[test]
fn an_alias_that_another_model_already_answers_to_is_refused() {
    let toml = "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"openai\"\n\
                model = \"gpt-4o\"\nno_key = true\n\n\
                [[upstreams.models]]\nname = \"b\"\naliases = [\"a\"]\n\n[[upstreams.models.targets]]\n\
                provider = \"openai\"\nmodel = \"gpt-4o\"\nno_key = true\n";
    let error = ConfigFile::parse(toml, "gateway.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("model `b`: `a` already reaches a model"),
        "{error}"
    );
}
