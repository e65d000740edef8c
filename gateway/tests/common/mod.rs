//! An in-process gateway on 127.0.0.1:0 in front of a scripted upstream, and a plain HTTP client.
#![allow(dead_code)]

pub mod console_forms;
pub mod kinds;
pub mod process;
pub mod usage;
pub mod webdriver;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tower_chat::test_server::{Part, RecordedRequest, Reply, ScriptedProvider};
use tower_chat_gateway::{Config, Gateway};

/// A `[guardrail]` policy for every request: keys blocked, personal data redacted.
pub const GUARDRAIL_SECRETS_AND_PERSONAL_DATA: &str = r#"
[[guardrail.policy]]
[[guardrail.policy.check]]
kind = "secrets"
[[guardrail.policy.check]]
kind = "personal_data"
"#;

pub struct Harness {
    pub provider: ScriptedProvider,
    pub addr: SocketAddr,
    pub files: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    pub server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// Reloads `[upstreams]` from `config.config_path` (when the gateway runs `[upstreams]` models).
    pub reloader: Option<tower_chat_gateway::upstreams::Reloader>,
}

impl Harness {
    /// A gateway whose upstream answers with `handler`; `tweak` adjusts the config (files dir already set).
    pub async fn start(
        handler: impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static,
        tweak: impl FnOnce(&mut Config),
    ) -> Harness {
        let provider = ScriptedProvider::start(handler).await;
        let files = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(files.path().join("root")).unwrap();
        let mut config = Config::new(provider.base_url());
        config.files = Some(files.path().join("root"));
        // The server-side tools are opt-in; these tests run the tool loop with the gateway's own `add`.
        config.add_tool = true;
        // The scripted upstream takes no key (a test that sends one names its variable in `tweak`).
        config.no_upstream_key = true;
        config.db = files.path().join("gateway.db");
        config.shutdown_timeout = Duration::from_secs(5);
        tweak(&mut config);
        let gateway = Gateway::new(&config).await.expect("gateway");
        let reloader = gateway.reloader();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(gateway.serve(listener, async {
            let _ = rx.await;
        }));
        Harness {
            provider,
            addr,
            files,
            shutdown: Some(tx),
            server: Some(server),
            reloader,
        }
    }

    /// The gateway's call records: its SQLite file (`--db`), opened beside it.
    pub async fn records(&self) -> tower_chat_persistence::SqliteStore {
        tower_chat_persistence::SqliteStore::open(self.files.path().join("gateway.db"))
            .await
            .unwrap()
    }

    /// The files root (`--files`).
    pub fn root(&self) -> std::path::PathBuf {
        self.files.path().join("root")
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Ask the server to shut down.
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// POST a chat completion request body.
    pub async fn chat(&self, body: &Value) -> Answer {
        post(&self.url("/v1/chat/completions"), body.to_string(), &[]).await
    }

    /// POST `body` to `path` with extra headers.
    pub async fn post_json(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Answer {
        post(&self.url(path), body.to_string(), headers).await
    }

    /// The messages of the upstream's `n`th request.
    pub fn upstream_messages(&self, n: usize) -> Vec<Value> {
        self.provider.requests()[n].body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// An HTTP answer, body read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of an SSE body, in order (`[DONE]` kept as the string).
    pub fn events(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not an SSE data event: {e:?}"))
                    .to_owned()
            })
            .collect()
    }

    /// The `event:` names and JSON payloads of an SSE body that names its events (Anthropic, Responses).
    pub fn named_events(&self) -> Vec<(String, Value)> {
        self.body
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let (name, data) = e
                    .strip_prefix("event: ")
                    .and_then(|e| e.split_once("\ndata: "))
                    .unwrap_or_else(|| panic!("not a named SSE event: {e:?}"));
                let data: Value = serde_json::from_str(data).unwrap();
                assert_eq!(
                    data["type"], name,
                    "the event name repeats the payload's type"
                );
                (name.to_owned(), data)
            })
            .collect()
    }

    /// The JSON chunks of an SSE body (everything but `[DONE]`).
    pub fn chunks(&self) -> Vec<Value> {
        self.events()
            .iter()
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str(e).unwrap())
            .collect()
    }

    /// The text of a Chat Completions answer, streamed or whole.
    pub fn chat_text(&self, stream: bool) -> String {
        if stream {
            self.streamed_text()
        } else {
            self.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_else(|| panic!("no text: {}", self.body))
                .to_owned()
        }
    }

    /// The text of an Anthropic Messages answer, streamed (its `text_delta`s) or whole (its text blocks).
    pub fn messages_text(&self, stream: bool) -> String {
        if stream {
            self.named_events()
                .iter()
                .filter(|(name, _)| name == "content_block_delta")
                .filter_map(|(_, e)| e["delta"]["text"].as_str().map(str::to_owned))
                .collect()
        } else {
            let body = self.json();
            body["content"]
                .as_array()
                .unwrap_or_else(|| panic!("no content: {body}"))
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str().map(str::to_owned))
                .collect()
        }
    }

    /// The text of a Responses answer, streamed (its `response.output_text.delta`s) or whole (`output_text`
    /// parts of its message items).
    pub fn responses_text(&self, stream: bool) -> String {
        if stream {
            self.named_events()
                .iter()
                .filter(|(name, _)| name == "response.output_text.delta")
                .filter_map(|(_, e)| e["delta"].as_str().map(str::to_owned))
                .collect()
        } else {
            let body = self.json();
            body["output"]
                .as_array()
                .unwrap_or_else(|| panic!("no output: {body}"))
                .iter()
                .filter(|item| item["type"] == "message")
                .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
                .filter(|part| part["type"] == "output_text")
                .filter_map(|part| part["text"].as_str().map(str::to_owned))
                .collect()
        }
    }

    /// The text of a streamed answer.
    pub fn streamed_text(&self) -> String {
        self.chunks()
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }
}

pub async fn post(url: &str, body: impl Into<Bytes>, headers: &[(&str, &str)]) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(body.into())).unwrap())
        .await
        .expect("request");
    read(response).await
}

pub async fn get(url: &str) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let response = client
        .request(Request::get(url).body(Full::new(Bytes::new())).unwrap())
        .await
        .expect("request");
    read(response).await
}

/// Any request: `method` to `url` with `headers` and `body`.
pub async fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    send_through(HttpConnector::new(), method, url, headers, body).await
}

/// The same, sent from the local address `from` (any of 127.0.0.0/8 reaches a gateway on 127.0.0.1): what a
/// test of per-address limits needs.
pub async fn send_from(
    from: &str,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from.parse().unwrap()));
    send_through(connector, method, url, headers, body).await
}

async fn send_through(
    connector: HttpConnector,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector);
    read(
        client
            .request(built(method, url, headers, body))
            .await
            .expect("request"),
    )
    .await
}

fn built(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Request<Full<Bytes>> {
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

/// One HTTP/2 connection to `addr` with prior knowledge (h2c: no upgrade, no TLS); every clone of the sender
/// opens its streams on it.
pub async fn http2(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    sender
}

/// A request for an HTTP/2 stream to the gateway at `addr` (the URI carries the `:authority` the host check
/// reads).
pub fn http2_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Request<Full<Bytes>> {
    built(method, &format!("http://{addr}{path}"), headers, body)
}

/// Read an answer whose head has arrived: its status, headers and whole body.
pub async fn read(response: http::Response<hyper::body::Incoming>) -> Answer {
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Log in to the console with an operator key, as its login form does: the session cookie (`name=value`).
pub async fn console_login(gw: &Harness, key: &str) -> String {
    let answer = send(
        "POST",
        &gw.url("/console/login"),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("sec-fetch-site", "same-origin"),
        ],
        &format!("key={key}"),
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    answer.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// A minimal request body.
pub fn request(stream: bool, user: &str) -> Value {
    let mut body = json!({
        "model": "test-model",
        "messages": [{"role": "user", "content": user}],
        "stream": stream,
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

/// The content of the tool message answering `call_id` in an upstream request's messages.
pub fn tool_result(messages: &[Value], call_id: &str) -> Option<String> {
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str().map(str::to_owned))
}

/// A turn that writes a file: `write_file` with `arguments` (call `call_write`), then `Result: <its result>`.
pub fn write_file_then_answer(req: &RecordedRequest, arguments: &str) -> Reply {
    match tool_result(req.body["messages"].as_array().unwrap(), "call_write") {
        None => Reply::openai_tool_calls(&[("call_write", "write_file", arguments)]),
        Some(result) => Reply::openai_text(&format!("Result: {result}")),
    }
}

/// An OpenAI-style streaming answer that says `text`, then calls `name` with `arguments` (call id `id`).
pub fn text_then_tool_call(text: &str, id: &str, name: &str, arguments: &str) -> Reply {
    Reply::openai_stream(&[
        json!({"id": "chatcmpl-scripted", "model": "scripted-model",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function",
            "function": {"name": name, "arguments": arguments}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}}),
    ])
}

/// The marker after which a user's message carries the `write_file` arguments [`write_as_asked`] calls with.
pub const WRITE_ARGUMENTS: &str = "ARGUMENTS:";

/// A turn that writes what the user asked for: the model says what it will do, then calls `write_file` with the
/// arguments after [`WRITE_ARGUMENTS`] in the first user message (call `call_write`); then `Result: <result>`.
pub fn write_as_asked(req: &RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    if let Some(result) = tool_result(messages, "call_write") {
        return Reply::openai_text(&format!("Result: {result}"));
    }
    let asked = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let arguments = asked
        .split_once(WRITE_ARGUMENTS)
        .map_or("{}", |(_, arguments)| arguments.trim());
    text_then_tool_call(
        "I will write the file as you asked.\nHere is the call:",
        "call_write",
        "write_file",
        arguments,
    )
}

/// A turn of three model calls: `add(2, 3)`, then `add(5, 4)` with the first result, then the answer.
pub fn three_add_calls(req: &RecordedRequest, _index: usize) -> Reply {
    let messages = req.body["messages"].as_array().unwrap();
    match (
        tool_result(messages, "call_add"),
        tool_result(messages, "call_add2"),
    ) {
        (None, _) => Reply::openai_tool_calls(&[("call_add", "add", r#"{"a": 2, "b": 3}"#)]),
        (Some(_), None) => Reply::openai_tool_calls(&[("call_add2", "add", r#"{"a": 5, "b": 4}"#)]),
        (Some(_), Some(sum)) => Reply::openai_text(&format!("The sum is {sum}")),
    }
}

/// The upstream the wire-format tests share, scripted by the conversation's first user message: `text` answers,
/// `add` and `weather` call a tool and then answer with its result, `write` calls `write_file` with
/// `write_arguments` (each test file writes its own file), `ratelimit` is a 429 with `Retry-After: 3`, `abort`
/// cuts the stream after one delta; anything else is a 400 naming it.
pub fn wire_upstream(
    write_arguments: &'static str,
) -> impl Fn(&RecordedRequest, usize) -> Reply + Send + Sync + 'static {
    move |req, _index| {
        let messages = req.body["messages"].as_array().unwrap();
        let first_user = messages
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        let tool_round =
            |call_id: &str, tool: &str, arguments: &str, answer: &str| match tool_result(
                messages, call_id,
            ) {
                None => Reply::openai_tool_calls(&[(call_id, tool, arguments)]),
                Some(result) => Reply::openai_text(&format!("{answer}{result}")),
            };
        match first_user {
            "text" => Reply::openai_text("Hello from upstream"),
            "add" => tool_round("call_add", "add", r#"{"a": 2, "b": 3}"#, "The sum is "),
            "weather" => tool_round("call_w", "get_weather", r#"{"city": "Oslo"}"#, "It is "),
            "write" => tool_round("call_write", "write_file", write_arguments, "written: "),
            "ratelimit" => Reply::json(429, json!({"error": {"message": "slow down"}}))
                .header("retry-after", "3"),
            "abort" => Reply::sse_chunks([
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial \"}}]}\n\n",
            ])
            .then(Part::Pause(Duration::from_millis(20)))
            .then(Part::Abort),
            other => Reply::json(
                400,
                json!({"error": {"message": format!("unscripted {other}")}}),
            ),
        }
    }
}

/// The gateway key the official-client tests use.
pub const PYTHON_KEY: &str = "sk-python";

/// A key file holding [`PYTHON_KEY`], when `python3` has `package`; otherwise a visible skip (`None`), which
/// fails the test when `CI` is set.
pub fn python_keys(test: &str, package: &str) -> Option<tempfile::NamedTempFile> {
    if !tower_chat_testkit::python_package(test, package) {
        return None;
    }
    let keys = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(keys.path(), format!("{PYTHON_KEY}\n")).unwrap();
    Some(keys)
}

/// Run `tests/<script>` with `args`; assert it exited 0 and printed every check.
pub async fn run_python(script: &str, args: &[String], checks: &[&str]) {
    let script = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    tower_chat_testkit::run_python(script, args, checks).await;
}

/// An upstream whose stream starts and then hangs: each request stays in flight until the client leaves.
pub fn hanging(_: &RecordedRequest, _: usize) -> Reply {
    let first = json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}}]});
    Reply::sse_chunks([format!("data: {first}\n\n")]).then(Part::Hang)
}

/// Send `body` to `path` on a connection of its own (with `key` as its bearer key) and return once the answer's
/// first bytes arrived, with them: a streaming request is then in flight until the socket is dropped.
pub async fn open_request(
    addr: SocketAddr,
    key: Option<&str>,
    path: &str,
    body: &Value,
) -> (tokio::net::TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let body = body.to_string();
    let auth = key
        .map(|k| format!("authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}content-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = socket.read(&mut buf).await.unwrap();
    (socket, String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The name libtest knows a test of this binary by, for running it alone in a child process with `--exact`:
/// its path below the binary's root, so `test_path(module_path!(), "holder_process")` in an area's module
/// `connections` is `connections::holder_process`, and plain `holder_process` in a binary of one file.
pub fn test_path(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{test}"),
        None => test.to_owned(),
    }
}
