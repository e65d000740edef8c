//! Content policies at the gateway (`[guardrail]`), over real HTTP in front of the scripted upstream: the policy
//! a request gets by caller, route and model (first match wins); a blocked request as each format's 400 error, a
//! redacted one sent on with the label; a blocked answer ended as each format ends a filtered answer, streamed
//! and whole, with redactions in the text the client reads; every verdict in `/metrics`; a bad policy refusing
//! the start; the official `openai` client reading `content_filter`.

use crate::common;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply};
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_gateway::{Config, Gateway};

use common::{Answer, Harness};

/// What the scripted model says when asked to leak: an email (redacted), then a key (blocked), both cut across
/// deltas.
const LEAK: &str =
    "Write to ops@example.com, the key is sk-proj-ABCDEFGHIJKLMNOPQRSTUV123 and more";
/// What the client reads of it.
const SHOWN: &str = "Write to [REDACTED:email], the key is ";
const NOTICE: &str =
    "[The rest of this answer was withheld by the content policy (check `secrets`).]";

/// `text` as an OpenAI stream of 5-byte deltas.
fn in_pieces(text: &str) -> Reply {
    let mut chunks = vec![json!({"id": "chatcmpl-scripted", "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})];
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(5);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        chunks.push(json!({"choices": [{"index": 0, "delta": {"content": &rest[..cut]}}]}));
        rest = &rest[cut..];
    }
    chunks.push(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    chunks.push(json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}));
    Reply::openai_stream(&chunks)
}

/// The upstream: a leak when the last user message says `leak`, else a plain answer.
fn upstream(request: &RecordedRequest, _index: usize) -> Reply {
    let last = request.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    if last.contains("leak") {
        in_pieces(LEAK)
    } else {
        in_pieces("a plain answer")
    }
}

const KEYS: &str = "alice:sk-alice\nbob:sk-bob\n";

async fn gateway(policies: &str) -> Harness {
    let file = ConfigFile::parse(policies, "gateway.toml").unwrap();
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), KEYS).unwrap();
    let path = keys.path().to_owned();
    let gw = Harness::start(upstream, |config| {
        config.file = file;
        config.api_keys_file = Some(path);
    })
    .await;
    // The keys are read at start.
    drop(keys);
    gw
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Chat,
    Messages,
    Responses,
}

const FORMATS: [Format; 3] = [Format::Chat, Format::Messages, Format::Responses];

impl Format {
    fn path(self) -> &'static str {
        match self {
            Format::Chat => "/v1/chat/completions",
            Format::Messages => "/v1/messages",
            Format::Responses => "/v1/responses",
        }
    }

    fn body(self, model: &str, text: &str, stream: bool) -> Value {
        match self {
            Format::Chat => json!({"model": model, "stream": stream,
                "messages": [{"role": "user", "content": text}]}),
            Format::Messages => json!({"model": model, "stream": stream, "max_tokens": 100,
                "messages": [{"role": "user", "content": text}]}),
            Format::Responses => json!({"model": model, "stream": stream, "input": text}),
        }
    }

    /// The error's `code`, asserting the format's error shape.
    fn error_code(self, answer: &Answer) -> String {
        let body = answer.json();
        match self {
            Format::Chat | Format::Responses => {
                assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
                body["error"]["code"].as_str().unwrap().to_owned()
            }
            Format::Messages => {
                assert_eq!(body["type"], "error", "{body}");
                assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
                body["error"]["code"].as_str().unwrap().to_owned()
            }
        }
    }

    /// The answer's text and how the format said it ended.
    fn read(self, answer: &Answer, stream: bool) -> (String, String) {
        assert_eq!(answer.status, 200, "{}", answer.body);
        match (self, stream) {
            (Format::Chat, false) => {
                let body = answer.json();
                let choice = &body["choices"][0];
                (
                    choice["message"]["content"].as_str().unwrap().to_owned(),
                    choice["finish_reason"].as_str().unwrap().to_owned(),
                )
            }
            (Format::Chat, true) => {
                let finish = answer
                    .chunks()
                    .iter()
                    .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_owned))
                    .collect::<Vec<_>>();
                assert_eq!(finish.len(), 1, "one finish: {}", answer.body);
                (answer.streamed_text(), finish[0].clone())
            }
            (Format::Messages, false) => {
                let body = answer.json();
                (
                    body["content"][0]["text"].as_str().unwrap().to_owned(),
                    body["stop_reason"].as_str().unwrap().to_owned(),
                )
            }
            (Format::Messages, true) => {
                let events = answer.named_events();
                let text = events
                    .iter()
                    .filter(|(name, _)| name == "content_block_delta")
                    .filter_map(|(_, e)| e["delta"]["text"].as_str())
                    .collect();
                let stop = events
                    .iter()
                    .find(|(name, _)| name == "message_delta")
                    .map(|(_, e)| e["delta"]["stop_reason"].as_str().unwrap().to_owned())
                    .unwrap();
                assert_eq!(events.last().unwrap().0, "message_stop");
                (text, stop)
            }
            (Format::Responses, false) => responses_outcome(&answer.json()),
            (Format::Responses, true) => {
                let events = answer.named_events();
                let text: String = events
                    .iter()
                    .filter(|(name, _)| name == "response.output_text.delta")
                    .filter_map(|(_, e)| e["delta"].as_str())
                    .collect();
                let (name, last) = events.last().unwrap();
                assert_eq!(name, "response.incomplete", "{}", answer.body);
                let (whole, ending) = responses_outcome(&last["response"]);
                assert_eq!(whole, text, "the final response holds what was streamed");
                (text, ending)
            }
        }
    }
}

/// A Responses object's text and `status` (with the reason when incomplete).
fn responses_outcome(response: &Value) -> (String, String) {
    let text = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().unwrap().iter())
        .filter_map(|part| part["text"].as_str())
        .collect();
    let status = response["status"].as_str().unwrap();
    let ending = match status {
        "incomplete" => format!(
            "incomplete:{}",
            response["incomplete_details"]["reason"].as_str().unwrap()
        ),
        other => other.to_owned(),
    };
    (text, ending)
}

async fn ask(
    gw: &Harness,
    format: Format,
    key: &str,
    model: &str,
    text: &str,
    stream: bool,
) -> Answer {
    let auth = format!("Bearer {key}");
    gw.post_json(
        format.path(),
        &format.body(model, text, stream),
        &[("authorization", &auth)],
    )
    .await
}

/// The value of the `/metrics` series with exactly these labels (0 when absent).
async fn counted(gw: &Harness, check: &str, action: &str, stage: &str) -> u64 {
    let scrape = common::get(&gw.url("/metrics")).await;
    let wanted = format!(
        "tower_chat_guardrail_verdicts_total{{check=\"{check}\",action=\"{action}\",stage=\"{stage}\"}} "
    );
    scrape
        .body
        .lines()
        .find_map(|line| line.strip_prefix(&wanted))
        .map_or(0, |value| value.trim().parse().unwrap())
}

const SECRETS_AND_PERSONAL_DATA: &str = common::GUARDRAIL_SECRETS_AND_PERSONAL_DATA;

#[tokio::test]
async fn a_blocked_request_is_a_400_content_filter_in_each_formats_error_shape_and_a_redacted_one_goes_on(
) {
    let gw = gateway(SECRETS_AND_PERSONAL_DATA).await;
    for format in FORMATS {
        for stream in [false, true] {
            let answer = ask(
                &gw,
                format,
                "sk-bob",
                "m",
                "use AKIAIOSFODNN7EXAMPLE please",
                stream,
            )
            .await;
            assert_eq!(answer.status, 400, "{format:?}: {}", answer.body);
            assert_eq!(format.error_code(&answer), "content_filter", "{format:?}");
            assert!(
                !answer.body.contains("AKIAIOSFODNN7EXAMPLE"),
                "{}",
                answer.body
            );
        }
    }
    assert!(
        gw.provider.requests().is_empty(),
        "nothing was sent upstream"
    );
    assert_eq!(counted(&gw, "secrets", "block", "request").await, 6);

    // Redacted, the request goes on: the upstream reads the label, never the address.
    for format in FORMATS {
        let answer = ask(
            &gw,
            format,
            "sk-bob",
            "m",
            "mail jane@example.com today",
            false,
        )
        .await;
        assert_eq!(answer.status, 200, "{format:?}: {}", answer.body);
    }
    for request in gw.provider.requests() {
        let sent = request.body["messages"].to_string();
        assert!(sent.contains("mail [REDACTED:email] today"), "{sent}");
        assert!(!sent.contains("jane@"), "{sent}");
    }
    assert_eq!(counted(&gw, "personal_data", "redact", "request").await, 3);
}

#[tokio::test]
async fn a_blocked_answer_ends_as_each_format_ends_a_filtered_answer_with_redactions_shown() {
    let gw = gateway(SECRETS_AND_PERSONAL_DATA).await;
    for format in FORMATS {
        for stream in [false, true] {
            let answer = ask(&gw, format, "sk-bob", "m", "please leak", stream).await;
            let (text, ending) = format.read(&answer, stream);
            assert!(
                text.starts_with(SHOWN) && text.ends_with(NOTICE),
                "{format:?} stream={stream}: {text:?}"
            );
            assert!(!answer.body.contains("ops@example.com"), "{}", answer.body);
            assert!(!answer.body.contains("sk-proj"), "{}", answer.body);
            let filtered = match format {
                Format::Chat => "content_filter",
                Format::Messages => "refusal",
                Format::Responses => "incomplete:content_filter",
            };
            assert_eq!(ending, filtered, "{format:?} stream={stream}");
        }
    }
    // A plain answer passes untouched and ends as usual.
    let (text, ending) = Format::Chat.read(
        &ask(&gw, Format::Chat, "sk-bob", "m", "hi", true).await,
        true,
    );
    assert_eq!((text.as_str(), ending.as_str()), ("a plain answer", "stop"));
    assert_eq!(counted(&gw, "personal_data", "redact", "output").await, 6);
    assert_eq!(counted(&gw, "secrets", "block", "output").await, 6);
    assert_eq!(counted(&gw, "secrets", "block", "request").await, 0);
}

#[tokio::test]
async fn each_request_gets_the_first_policy_matching_its_caller_route_and_model() {
    let gw = gateway(
        r#"
[[guardrail.policy]]
name = "alice on messages"
callers = ["alice"]
routes = ["messages"]
[[guardrail.policy.check]]
kind = "deny_list"
name = "topics"
words = ["project zeus"]

[[guardrail.policy]]
name = "strict model"
models = ["strict-model"]
[[guardrail.policy.check]]
kind = "pattern"
name = "ticket"
pattern = "TCK-[0-9]{4,8}"
"#,
    )
    .await;
    let cases = [
        // The first policy: its caller on its route.
        (
            Format::Messages,
            "sk-alice",
            "m",
            "about Project Zeus",
            Some("topics"),
        ),
        // Another route or another caller: no policy matches.
        (Format::Chat, "sk-alice", "m", "about project zeus", None),
        (Format::Messages, "sk-bob", "m", "about project zeus", None),
        // The second policy, by model, on any route and caller.
        (
            Format::Chat,
            "sk-bob",
            "strict-model",
            "see TCK-12345",
            Some("ticket"),
        ),
        (
            Format::Responses,
            "sk-alice",
            "strict-model",
            "see TCK-12345",
            Some("ticket"),
        ),
        (Format::Chat, "sk-bob", "m", "see TCK-12345", None),
        // Both match: the first listed applies alone, so the ticket passes.
        (
            Format::Messages,
            "sk-alice",
            "strict-model",
            "see TCK-12345",
            None,
        ),
        (
            Format::Messages,
            "sk-alice",
            "strict-model",
            "project zeus",
            Some("topics"),
        ),
    ];
    for (format, key, model, text, blocked_by) in cases {
        let answer = ask(&gw, format, key, model, text, false).await;
        match blocked_by {
            Some(_) => {
                assert_eq!(
                    answer.status, 400,
                    "{format:?} {key} {model} {text}: {}",
                    answer.body
                );
                assert_eq!(format.error_code(&answer), "content_filter");
            }
            None => assert_eq!(
                answer.status, 200,
                "{format:?} {key} {model} {text}: {}",
                answer.body
            ),
        }
        if let Some(check) = blocked_by {
            assert!(
                answer.body.contains(&format!("`{check}`")),
                "{}",
                answer.body
            );
        }
    }
    assert_eq!(gw.provider.requests().len(), 4, "the passed requests only");
    assert_eq!(counted(&gw, "topics", "block", "request").await, 2);
    assert_eq!(counted(&gw, "ticket", "block", "request").await, 2);
}

#[tokio::test]
async fn a_bad_policy_refuses_the_start_naming_it() {
    let file = ConfigFile::parse(
        "[[guardrail.policy]]\nname = \"support\"\n[[guardrail.policy.check]]\nkind = \"pattern\"\n\
         name = \"t\"\npattern = \"TCK-[0-9]+\"\n",
        "gateway.toml",
    )
    .unwrap();
    let files = tempfile::tempdir().unwrap();
    let mut config = Config::new("http://127.0.0.1:9/v1".to_owned());
    config.no_upstream_key = true;
    config.db = files.path().join("gateway.db");
    config.file = file;
    let error = Gateway::new(&config).await.unwrap_err().to_string();
    assert!(
        error.contains("[[guardrail.policy]] #1 (\"support\"), check #1 (pattern)"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_reads_content_filter() {
    let test = "the_official_openai_client_reads_content_filter";
    let Some(keys) = common::python_keys(test, "openai") else {
        return;
    };
    let file = ConfigFile::parse(SECRETS_AND_PERSONAL_DATA, "gateway.toml").unwrap();
    let path = keys.path().to_owned();
    let gw = Harness::start(upstream, |config| {
        config.file = file;
        config.api_keys_file = Some(path);
    })
    .await;
    let args = [
        gw.base_url(),
        common::PYTHON_KEY.to_owned(),
        SHOWN.to_owned(),
        NOTICE.to_owned(),
    ];
    common::run_python(
        "guardrail_client.py",
        &args,
        &[
            "ok blocked request",
            "ok filtered answer",
            "ok filtered stream",
        ],
    )
    .await;
}
