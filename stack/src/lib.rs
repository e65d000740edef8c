#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod builder_ext;
pub mod prelude;

pub use builder_ext::ServiceBuilderExt;
/// The core: message model, [`ChatRequest`], event stream, typed errors, OpenAI-compatible and Anthropic leaves.
pub use tower_chat::*;

/// tower itself, so `ServiceBuilder`, `ServiceExt` and `Layer` need no dependency line of their own.
pub use tower;

/// The tool loop: `FunctionInvocationLayer`, `tool_json`, `tool_fn`, policies (feature `tools`).
#[cfg(feature = "tools")]
pub use tower_chat_function_invocation as tools;

/// Spans and metrics following the OpenTelemetry GenAI conventions (feature `tracing`).
#[cfg(feature = "tracing")]
pub use tower_chat_tracing as tracing;

/// Call records in SQLite (feature `sqlite`) or PostgreSQL (feature `postgres`).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use tower_chat_persistence as persistence;

/// Verified, durable human-in-the-loop approvals (feature `approval`; durable stores with `approval-sqlite` /
/// `approval-postgres`).
#[cfg(feature = "approval")]
pub use tower_chat_approval as approval;

/// Retry, fallback, circuit breaking and balancing (feature `resilience`).
#[cfg(feature = "resilience")]
pub use tower_chat_resilience as resilience;

/// Rate limits and budgets (feature `limits`; shared across replicas with `limits-redis`).
#[cfg(feature = "limits")]
pub use tower_chat_limits as limits;

/// A response cache: answers replayed per caller, identical calls in flight coalesced (feature `cache`; shared
/// across replicas through Redis with `cache-redis`).
#[cfg(feature = "cache")]
pub use tower_chat_cache as cache;

/// MCP servers as tool sources (feature `mcp`).
#[cfg(feature = "mcp")]
pub use tower_chat_mcp as mcp;

/// Content policies: secrets, personal data, patterns, moderation; block, redact or flag (feature `guardrail`).
#[cfg(feature = "guardrail")]
pub use tower_chat_guardrail as guardrail;
/// Typed answers: `StructuredExt::structured::<T>`, `StructuredOutputLayer`, partial objects while streaming
/// (feature `structured`).
#[cfg(feature = "structured")]
pub use tower_chat_structured_output as structured;

/// The repository README's stack (its first screen), compiled as a doctest here: it is written against this
/// crate, which the core crate cannot depend on.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct RootReadmeDoctests;

/// The guide's pages written against this crate (`docs/src`), compiled as doctests so every snippet a reader
/// copies builds. Snippets that cannot compile here say why and are marked `ignore`.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../../docs/src/library/stack.md")]
    pub struct Stack;
    #[doc = include_str!("../../docs/src/library/core.md")]
    pub struct Core;
    #[doc = include_str!("../../docs/src/library/structured-output.md")]
    pub struct StructuredOutput;
    #[doc = include_str!("../../docs/src/library/media.md")]
    pub struct Media;
    #[doc = include_str!("../../docs/src/library/guardrails.md")]
    pub struct Guardrails;
    #[doc = include_str!("../../docs/src/library/embedding.md")]
    pub struct Embedding;
    #[doc = include_str!("../../docs/src/library/cache.md")]
    pub struct Cache;
}
