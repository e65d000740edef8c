//! # tower-chat
//!
//! LLM chat calls as [`tower`](https://docs.rs/tower) services. A chat call is a
//! `Service<ChatRequest, Response = ChatStream, Error = ChatError>` whose response is a stream of
//! [`ChatEvent`]s; every cross-cutting concern (the tool loop, approvals, persistence, telemetry) is a `Layer`
//! over such a service, and the stack ends in an HTTP leaf service: [`openai::OpenAiChat`] (Chat Completions and
//! every server that speaks it), [`responses::ResponsesChat`] (OpenAI Responses), [`anthropic::AnthropicChat`]
//! (Messages; [`anthropic::AnthropicVertexChat`] on Vertex AI), [`azure::AzureOpenAiChat`] (Azure OpenAI), [`gemini::GeminiChat`] (Gemini API and Vertex AI) and,
//! with the `bedrock` feature, `bedrock::BedrockChat` (Amazon Bedrock's Converse, SigV4-signed).
//!
//! ```no_run
//! use tower::ServiceExt;
//! use tower_chat::{openai::OpenAiChat, ChatRequest, ChatStreamExt, Message};
//!
//! # async fn run() -> Result<(), tower_chat::ChatError> {
//! let leaf = OpenAiChat::builder()
//!     .base_url("https://api.openai.com/v1")
//!     .api_key(std::env::var("OPENAI_API_KEY").unwrap_or_default())
//!     .model("gpt-4o-mini")
//!     .build()?;
//! let request = ChatRequest::new(vec![Message::user("Say hello")]);
//! let response = leaf.oneshot(request).await?.collect_response().await?;
//! println!("{}", response.text());
//! # Ok(()) }
//! ```
//!
//! ## The service contract
//! - The service future resolves once the provider accepted the request (HTTP status known), so
//!   authentication, rate-limit and server errors arrive as service errors.
//! - Failures after the first byte (a dropped connection, a malformed event, an error event) arrive as an `Err`
//!   item, after which the stream ends. A stream never ends silently without a [`ChatEvent::Finish`] unless
//!   an `Err` item said why.
//! - Context travels in [`ChatRequest::extensions`]: [`ConversationId`], [`CallerIdentity`],
//!   [`CancellationToken`], [`ApprovalDecisions`], [`GuardrailAudit`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]
mod answer_screen;
pub mod anthropic;
mod approval;
pub mod azure;
#[cfg(feature = "bedrock")]
pub mod bedrock;
mod boxed;
mod carried;
mod content;
mod context;
mod error;
mod event;
pub mod forced_answer;
pub mod gemini;
mod guardrail;
pub mod leaf;
mod macros;
mod message;
mod metadata;
pub mod openai;
pub mod output_limits;
pub mod output_schema;
mod price;
mod provider_extra;
mod reasoning;
mod reasoning_options;
mod request;
mod response;
pub mod responses;
pub mod schema_limits;
pub mod sse;
mod stream;
#[cfg(feature = "test-server")]
pub mod test_server;
mod tool_kind;
mod tool_namespace;
mod tower_metadata;
pub mod transport;

pub use answer_screen::{
    AnswerScreen, CallScreens, GuardedCall, JudgedText, JudgedToolCall, JudgedToolResult, Screened,
};
pub use approval::{ApprovalDecision, ApprovalDecisions, ApprovalRequest};
pub use boxed::BoxChatService;
pub use carried::{ApiFormat, Carried, DroppedFields, ForwardedHeaders};
pub use content::{
    AudioPart, Blob, CacheHint, Content, DataUrl, FilePart, ImageDetail, ImagePart, InvalidMedia,
    MediaSource, MediaUrl, Part, ProviderPart, TextPart,
};
pub use context::{CallerIdentity, ConversationId, EstimatedUsage};
pub use error::{BoxError, ChatError, ErrorKind, TimeoutPhase};
pub use event::{ChatEvent, FinishReason, Usage};
pub use guardrail::{GuardrailAction, GuardrailAudit, GuardrailStage, GuardrailVerdict, TextSpan};
pub use message::{
    AssistantMessage, CallKind, Message, PlacedPart, ToolArguments, ToolCall, ToolMessage,
};
pub use metadata::{known_context_window, ModelInfo, ModelMetadata};
pub use price::{Cost, ModelPrice, PriceTable};
pub use provider_extra::ProviderExtra;
pub use reasoning::{Continuation, ReasoningPart};
pub use reasoning_options::{ReasoningEffort, ReasoningOptions, Thinking};
pub use request::{
    ChatOptions, ChatRequest, ResponseFormat, Shared, SystemMessagesInPlace, ToolChoice, ToolSpec,
};
pub use response::{ChatResponse, ResponseBuilder};
pub use stream::{cancellable, ChatService, ChatStream, ChatStreamExt};
pub use tokio_util::sync::CancellationToken;
pub use tool_kind::{HostedTool, ToolKind, Unhosted};
pub use tool_namespace::{namespaced_freeform_tools, namespaced_tool_name, namespaced_tools};
