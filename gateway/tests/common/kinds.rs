//! A scripted upstream of every kind `[upstreams]` can name, each behind a model of its own (`m-<kind>`), with
//! the credential each kind takes: a key variable (`openai`, `azure`), a key file (`anthropic`, `gemini`), none
//! (`openai-responses`), a service-account key whose tokens come from a scripted token endpoint (`vertex`), AWS
//! credentials in the standard variables, every request SigV4-signed and checked (`bedrock`). `anthropic-vertex`
//! (Claude on Vertex AI, the `vertex` service account) and `azure-responses` (the Responses API on Azure, the key
//! variable) are started only where a test names them
//! ([`KindUpstreams::start_only`]).

use std::path::Path;

use serde_json::{json, Value};
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};

/// Every kind, in the order the tests report them.
pub const KINDS: [&str; 7] = [
    "openai",
    "openai-responses",
    "anthropic",
    "azure",
    "gemini",
    "vertex",
    "bedrock",
];

/// The key the `openai` and `azure` upstreams expect (from the variables [`KEY_ENV`] names).
pub const KEY: &str = "sk-kinds-key";
/// The variable holding [`KEY`].
pub const KEY_ENV: &str = "TOWER_CHAT_GATEWAY_KINDS_KEY";
/// The access token the scripted token endpoint hands the `vertex` and `anthropic-vertex` targets' service account.
pub const VERTEX_TOKEN: &str = "ya29.kinds-token";

/// The AWS credentials the `bedrock` target signs with (from the standard variables) and its upstream checks.
pub const AWS_ACCESS_KEY_ID: &str = "AKIAKINDSTEST";
const AWS_SECRET_ACCESS_KEY: &str = "kinds/secret/key";

/// The credentials behind [`AWS_ACCESS_KEY_ID`].
pub fn aws_credentials() -> tower_chat::bedrock::AwsCredentials {
    tower_chat::bedrock::AwsCredentials::new(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, None)
}

/// A key generated for tests only (the core's fixture).
const SERVICE_ACCOUNT_KEY: &str = include_str!("../../../tests/data/service_account_test_key.pem");

pub type Handler = Box<dyn Fn(&RecordedRequest, usize) -> Reply + Send + Sync>;

/// One kind's scripted server.
pub struct KindUpstream {
    pub kind: &'static str,
    pub server: ScriptedProvider,
}

impl KindUpstream {
    /// The model clients name to reach this kind.
    pub fn model(&self) -> String {
        format!("m-{}", self.kind)
    }
}

/// The scripted upstreams and the token endpoint; the credential files live as long as this.
pub struct KindUpstreams {
    pub kinds: Vec<KindUpstream>,
    pub tokens: ScriptedProvider,
    files: tempfile::TempDir,
}

impl KindUpstreams {
    /// A server per kind, answering with `handler(kind)`.
    pub async fn start(handler: impl Fn(&'static str) -> Handler) -> KindUpstreams {
        Self::start_only(&KINDS, handler).await
    }

    /// A server for each of `only`, answering with `handler(kind)`.
    pub async fn start_only(
        only: &[&'static str],
        handler: impl Fn(&'static str) -> Handler,
    ) -> KindUpstreams {
        std::env::set_var(KEY_ENV, KEY);
        std::env::set_var("AWS_ACCESS_KEY_ID", AWS_ACCESS_KEY_ID);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", AWS_SECRET_ACCESS_KEY);
        std::env::remove_var("AWS_SESSION_TOKEN");
        let tokens = ScriptedProvider::start(|_, _| {
            Reply::json(
                200,
                json!({"access_token": VERTEX_TOKEN, "expires_in": 3599, "token_type": "Bearer"}),
            )
        })
        .await;
        let files = tempfile::tempdir().unwrap();
        std::fs::write(files.path().join("key.txt"), format!("{KEY}\n")).unwrap();
        let account = json!({
            "type": "service_account",
            "project_id": "kinds-project",
            "private_key_id": "kinds-key",
            "private_key": SERVICE_ACCOUNT_KEY,
            "client_email": "gateway@kinds-project.iam.gserviceaccount.com",
            "token_uri": format!("http://{}/token", tokens.addr()),
        });
        std::fs::write(
            files.path().join("service-account.json"),
            account.to_string(),
        )
        .unwrap();
        let mut kinds = Vec::new();
        for &kind in only {
            let server = ScriptedProvider::start(handler(kind)).await;
            kinds.push(KindUpstream { kind, server });
        }
        KindUpstreams {
            kinds,
            tokens,
            files,
        }
    }

    /// The upstream of `kind`.
    pub fn get(&self, kind: &str) -> &KindUpstream {
        self.kinds.iter().find(|k| k.kind == kind).unwrap()
    }

    /// The key file (holding [`KEY`]).
    pub fn key_file(&self) -> std::path::PathBuf {
        self.files.path().join("key.txt")
    }

    /// The `[[upstreams.models.targets]]` table reaching `kind`'s server.
    pub fn target(&self, kind: &str) -> String {
        let upstream = self.get(kind);
        let addr = upstream.server.addr();
        let base = upstream.server.base_url();
        let dir = self.files.path();
        let path = |name: &str| toml_path(&dir.join(name));
        let fields = match kind {
            "openai" => format!("model = \"gpt-4o\"\nbase_url = \"{base}\"\nkey_env = \"{KEY_ENV}\""),
            "openai-responses" => format!("model = \"gpt-5-mini\"\nbase_url = \"{base}\"\nno_key = true"),
            "anthropic" => format!(
                "model = \"claude-sonnet-4-5\"\nbase_url = \"{base}\"\nkey_file = {}",
                path("key.txt")
            ),
            "azure" => format!(
                "model = \"gpt-4o\"\nbase_url = \"http://{addr}\"\nazure_deployment = \"gpt-4o-prod\"\n\
                 api_version = \"2024-10-21\"\nkey_env = \"{KEY_ENV}\""
            ),
            "azure-responses" => format!(
                "model = \"gpt-5-mini-prod\"\nbase_url = \"http://{addr}\"\nkey_env = \"{KEY_ENV}\""
            ),
            "gemini" => format!(
                "model = \"gemini-2.5-flash\"\nbase_url = \"{base}\"\nkey_file = {}",
                path("key.txt")
            ),
            "vertex" => format!(
                "model = \"gemini-2.5-pro\"\nbase_url = \"http://{addr}\"\nproject = \"kinds-project\"\n\
                 location = \"europe-west4\"\ncredentials_file = {}",
                path("service-account.json")
            ),
            "anthropic-vertex" => format!(
                "model = \"claude-sonnet-4-5@20250929\"\nbase_url = \"http://{addr}\"\n\
                 project = \"kinds-project\"\nlocation = \"us-east5\"\ncredentials_file = {}",
                path("service-account.json")
            ),
            "bedrock" => format!(
                "model = \"anthropic.claude-3-haiku-20240307-v1:0\"\nbase_url = \"{base}\"\n\
                 region = \"eu-central-1\"\naws_env = true"
            ),
            other => panic!("no such kind {other}"),
        };
        format!("[[upstreams.models.targets]]\nprovider = \"{kind}\"\n{fields}\n")
    }

    /// `[upstreams]` with one model per kind (`m-<kind>`), no retries (a test counts every upstream request).
    pub fn toml(&self) -> String {
        let mut text = "[upstreams.retry]\nmax_attempts = 1\n\n".to_owned();
        for upstream in &self.kinds {
            text.push_str(&format!(
                "[[upstreams.models]]\nname = \"{}\"\n\n{}\n",
                upstream.model(),
                self.target(upstream.kind)
            ));
        }
        text
    }
}

/// A path as a TOML literal string.
pub fn toml_path(path: &Path) -> String {
    format!("'{}'", path.display())
}

/// What each kind's upstream sends for the credential, as `(header, value)`.
pub fn credential_header(kind: &str) -> (&'static str, String) {
    match kind {
        "openai" => ("authorization", format!("Bearer {KEY}")),
        "anthropic" => ("x-api-key", KEY.to_owned()),
        "azure" | "azure-responses" => ("api-key", KEY.to_owned()),
        "gemini" => ("x-goog-api-key", KEY.to_owned()),
        "vertex" | "anthropic-vertex" => ("authorization", format!("Bearer {VERTEX_TOKEN}")),
        _ => ("authorization", String::new()),
    }
}

/// The path a kind's upstream is called at (the scripted servers' own paths).
pub fn call_path(kind: &str, stream: bool) -> String {
    let gemini_method = if stream {
        "streamGenerateContent"
    } else {
        "generateContent"
    };
    match kind {
        "openai" => "/v1/chat/completions".into(),
        "openai-responses" => "/v1/responses".into(),
        "bedrock" if stream => "/v1/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream".into(),
        "bedrock" => "/v1/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse".into(),
        "anthropic" => "/v1/messages".into(),
        "azure" => "/openai/deployments/gpt-4o-prod/chat/completions".into(),
        "azure-responses" => "/openai/v1/responses".into(),
        "gemini" => format!("/v1/models/gemini-2.5-flash:{gemini_method}"),
        "vertex" => format!(
            "/v1/projects/kinds-project/locations/europe-west4/publishers/google/models/gemini-2.5-pro:\
             {gemini_method}"
        ),
        "anthropic-vertex" => format!(
            "/v1/projects/kinds-project/locations/us-east5/publishers/anthropic/models/\
             claude-sonnet-4-5@20250929:{}",
            if stream { "streamRawPredict" } else { "rawPredict" }
        ),
        other => panic!("no such kind {other}"),
    }
}

/// A plain text answer in `kind`'s wire format.
pub fn text_reply(kind: &str, text: &str) -> Reply {
    match kind {
        "openai" | "azure" => Reply::openai_text(text),
        "openai-responses" | "azure-responses" => Reply::responses_text(text),
        "anthropic" | "anthropic-vertex" => {
            tower_chat_testkit::replies::anthropic_text("claude-scripted", text)
        }
        "gemini" | "vertex" => Reply::gemini_text(text),
        "bedrock" => Reply::bedrock_text(text),
        other => panic!("no such kind {other}"),
    }
}

/// A call of `get_weather` for Oslo in `kind`'s wire format.
pub fn weather_call(kind: &str) -> Reply {
    match kind {
        "openai" | "azure" => {
            Reply::openai_tool_calls(&[("call_w", "get_weather", r#"{"city": "Oslo"}"#)])
        }
        "openai-responses" | "azure-responses" => {
            Reply::responses_tool_calls(&[("call_w", "get_weather", r#"{"city": "Oslo"}"#)])
        }
        "anthropic" | "anthropic-vertex" => Reply::anthropic_stream(&[
            json!({"type":"message_start","message":{"id":"msg_w","type":"message","role":"assistant",
                "model":"claude-scripted","content":[],"usage":{"input_tokens":20,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_w",
                "name":"get_weather","input":{}}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",
                "partial_json":"{\"city\": "}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",
                "partial_json":"\"Oslo\"}"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},
                "usage":{"output_tokens":9}}),
            json!({"type":"message_stop"}),
        ]),
        "gemini" | "vertex" => {
            Reply::gemini_function_calls(&[("get_weather", json!({"city": "Oslo"}))], None)
        }
        "bedrock" => {
            Reply::bedrock_tool_use(&[("tooluse_w", "get_weather", json!({"city": "Oslo"}))])
        }
        other => panic!("no such kind {other}"),
    }
}

/// The usage `(input, output)` [`weather_call`] and [`text_reply`] report for `kind`.
pub fn scripted_usage(kind: &str) -> [(u64, u64); 2] {
    match kind {
        "openai" | "azure" => [(20, 9), (12, 5)],
        // 40 prompt tokens (8 of them cached), 30 output.
        "openai-responses" | "azure-responses" => [(40, 30), (12, 5)],
        "anthropic" | "anthropic-vertex" => [(20, 9), (10, 5)],
        // Gemini's 40 thought tokens are output beside its 8 candidate tokens.
        "gemini" | "vertex" => [(30, 48), (12, 5)],
        "bedrock" => [(30, 8), (12, 5)],
        other => panic!("no such kind {other}"),
    }
}

/// Whether the gateway asked `request`'s upstream for a stream (each wire format says so its own way).
pub fn streamed(request: &RecordedRequest) -> bool {
    request.query.as_deref() == Some("alt=sse")
        || request.body["stream"] == true
        || request.path.ends_with("/converse-stream")
}

/// Whether `request` carries `kind`'s credential: the key or token in its header, or for `bedrock` a SigV4
/// signature that signing the request again with [`aws_credentials`] reproduces.
pub fn check_credential(kind: &str, request: &RecordedRequest) -> Result<(), String> {
    match kind {
        "openai-responses" => match request.headers.get("authorization") {
            None => Ok(()),
            Some(sent) => Err(format!("a keyless target sent {sent:?}")),
        },
        "bedrock" => tower_chat::test_server::check_bedrock_signature(request, &aws_credentials()),
        _ => {
            let (header, value) = credential_header(kind);
            match request.headers.get(header) {
                Some(sent) if sent == value.as_str() => Ok(()),
                other => Err(format!("{header}: {other:?}")),
            }
        }
    }
}

/// Whether `request` already carries `needle` anywhere in its body (in whatever shape its wire format gives it).
pub fn carries(request: &RecordedRequest, needle: &str) -> bool {
    fn walk(value: &Value, needle: &str) -> bool {
        match value {
            Value::String(s) => s.contains(needle),
            Value::Array(items) => items.iter().any(|v| walk(v, needle)),
            Value::Object(map) => map.values().any(|v| walk(v, needle)),
            _ => false,
        }
    }
    walk(&request.body, needle)
}
