//! # tower-chat-guardrail
//!
//! A [`GuardrailLayer`] holds a content policy — a list of [`Check`]s — and applies it to every call: to the
//! request before the model is called (every text it carries: messages of every role, documents, URLs, tools,
//! options; see the guide, `docs/src/library/guardrails.md`, "What is read"), to each tool call's arguments, to tool results a tool loop
//! inside produced, and to the model's answer as it streams. Each check's work per request is bounded
//! ([`GuardrailLayer::max_candidates`]).
//!
//! Each check has an action ([`GuardrailAction`]):
//! - **block**: a request is refused with an [`ErrorKind::PolicyBlocked`](tower_chat::ErrorKind::PolicyBlocked)
//!   error naming the check (refused before sending: a recorder keeps no copy of it); an answer ends with the
//!   text before the match, a notice ([`GuardrailLayer::block_message`]) and a
//!   [`FinishReason::ContentFilter`](tower_chat::FinishReason::ContentFilter) finish — the matched text is never
//!   sent, and the inner stream is dropped;
//! - **redact**: the match is replaced by `[REDACTED:<kind>]` (`[REDACTED:email]`) in the request before it
//!   leaves and in the answer's deltas before they reach the client;
//! - **flag**: the text goes through; the verdict is recorded.
//!
//! ```
//! use tower::{Layer, ServiceExt};
//! use tower_chat::openai::OpenAiChat;
//! use tower_chat::test_server::{Reply, ScriptedProvider};
//! use tower_chat::{ChatRequest, ChatStreamExt, ErrorKind, FinishReason, GuardrailAudit, Message};
//! use tower_chat_guardrail::{Check, GuardrailLayer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A scripted model over loopback HTTP that leaks an email and then a key.
//! let provider = ScriptedProvider::start(|_request, _index| {
//!     Reply::openai_text("Write to ops@example.com, the key is sk-proj-ABCDEFGHIJKLMNOPQRSTUV123 ok").rechunked(7)
//! })
//! .await;
//! let leaf = OpenAiChat::builder().base_url(provider.base_url()).api_key("test").model("gpt-4o-mini").build()?;
//!
//! // The default actions: secrets blocked, personal data redacted.
//! let guarded = GuardrailLayer::new().check(Check::secrets()).check(Check::personal_data()).layer(leaf);
//!
//! let audit = GuardrailAudit::new();
//! let request = ChatRequest::new(vec![Message::user("Where do I send the report?")]).with_extension(audit.clone());
//! let answer = guarded.clone().oneshot(request).await?.collect_response().await?;
//! assert!(answer.text().starts_with("Write to [REDACTED:email], the key is \n\n[The rest of this answer"));
//! assert_eq!(answer.finish_reason, Some(FinishReason::ContentFilter));
//! let verdicts = audit.verdicts();
//! assert_eq!((verdicts[1].check.as_str(), verdicts[1].detail.as_deref()), ("secrets", Some("openai_key")));
//!
//! // A request that carries a key is refused before it leaves.
//! let leak = ChatRequest::new(vec![Message::user("use AKIAIOSFODNN7EXAMPLE")]);
//! let refused = guarded.oneshot(leak).await.err().unwrap();
//! assert_eq!(refused.kind(), &ErrorKind::PolicyBlocked { check: "secrets".into() });
//! assert_eq!(provider.requests().len(), 1);
//! # Ok(()) }
//! ```
//!
//! ## Streams: what is held back
//! Pattern checks (secrets, personal data, your patterns and deny-lists, the output length) run on the stream
//! piece by piece and hold back only text a match could still be completing: at most the pattern's longest match,
//! and only the trailing run of bytes a match may contain — for prose, the last partial word (the table of each
//! built-in's bound is in `builtin.rs`'s docs and the guide, `docs/src/library/guardrails.md`). A match split across chunks is caught, and any
//! chunking of a text gives the same verdicts and the same redacted text as the whole text at once
//! (`tests/chunking.rs` checks it with proptest). Whole-text checks ([`TextCheck`]: moderation, a JSON Schema,
//! your own `async fn`) hold the answer's text until it is complete.
//!
//! ## Audit
//! Every verdict ([`GuardrailVerdict`]: check, action, stage, location, byte offsets of the span, the kind of
//! thing found — never the matched text) goes to the request's [`GuardrailAudit`], which the persistence layer
//! stores with the call's record, and is emitted as a `tracing` event (target `tower_chat_guardrail`) in the
//! current span. When a request was redacted the audit also holds the messages as sent, which the persistence
//! layer records instead of the caller's.
//!
//! ## Placement
//! Put the layer inside the recorders (persistence, telemetry), so they record what the client received and
//! what the provider was sent, and outside the tool loop to see each tool call and result as events (inside
//! it, tool results arrive as tool messages of the next round's request, which are checked too). A recorder
//! inside the layer (a gateway records each round inside its tool loop) is handed a [`tower_chat::GuardedCall`]
//! with the request: the request's verdicts and screens that apply the pattern checks to the answer's text (a
//! match split between rounds included), its tool calls and the tool results, so it keeps the answer as the
//! client saw it, redacted or withheld. With whole-text checks the recorder holds each text (and each tool call or
//! result those checks read) until it is complete and has it judged before it lets it on; the layer's guard takes
//! that judgement, so each text is judged once and the record holds what the client saw: a blocked text as the
//! block message, a redacted one redacted.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]

mod builtin;
mod check;
mod content;
mod invisible;
mod json;
mod layer;
mod moderation;
mod pattern;
mod policy;
mod request;
mod scan;
#[cfg(feature = "schema")]
mod schema;
mod screen;
mod segment;
mod service;
mod stream;

pub use check::{Check, CheckFn, CheckFuture, Finding, TextCheck};
pub use layer::GuardrailLayer;
pub use moderation::Moderation;
#[cfg(feature = "schema")]
pub use schema::JsonSchemaCheck;
pub use service::{Guardrail, ResponseFuture};
pub use tower_chat::{GuardrailAction, GuardrailAudit, GuardrailStage, GuardrailVerdict, TextSpan};

#[doc(hidden)]
pub mod bench_support {
    //! The scanner on its own, for the benches and the fuzz target: a policy's output checks run over a text in
    //! pieces.
    use std::sync::Arc;

    use tower_chat::GuardrailAction;

    use crate::check::Check;
    use crate::policy::{Policy, DEFAULT_MAX_CANDIDATES};
    use crate::scan::{Budget, Step, StreamScanner};

    /// A scanner of a policy's output checks.
    #[derive(Debug)]
    pub struct OutputScanner(StreamScanner);

    /// One decided hit: the check's name, its action, the span in bytes of the whole text, the kind found.
    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
    pub struct ScannedHit {
        /// The check's name.
        pub check: String,
        /// `block`, `redact` or `flag`.
        pub action: &'static str,
        /// The span's first byte.
        pub start: usize,
        /// One past the span's last byte.
        pub end: usize,
        /// The kind found (`email`), or "".
        pub kind: &'static str,
    }

    /// What a step let through.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Scanned {
        /// The text let through, redacted.
        pub text: String,
        /// The hits decided.
        pub hits: Vec<ScannedHit>,
        /// The blocking hit, when one ended the text.
        pub block: Option<ScannedHit>,
    }

    fn hit(hit: &crate::scan::Hit) -> ScannedHit {
        ScannedHit {
            check: hit.name.to_string(),
            action: match hit.action {
                GuardrailAction::Block => "block",
                GuardrailAction::Redact => "redact",
                GuardrailAction::Flag => "flag",
            },
            start: hit.span.start,
            end: hit.span.end,
            kind: hit.kind,
        }
    }

    fn scanned(step: Step) -> Scanned {
        Scanned {
            text: step.text,
            hits: step.hits.iter().map(hit).collect(),
            block: step.block.as_ref().map(hit),
        }
    }

    impl OutputScanner {
        /// A scanner for these checks' output stage (no work budget).
        pub fn new(checks: Vec<Check>) -> Self {
            let policy = Policy::new(checks, Arc::from(""), usize::MAX);
            OutputScanner(StreamScanner::new(
                policy.output.scan.clone(),
                Budget::default(),
            ))
        }

        /// Scan the next piece; the bytes let through and the hits decided.
        pub fn push(&mut self, piece: &str) -> (usize, usize) {
            let step = self.0.push(piece);
            (step.text.len(), step.hits.len())
        }

        /// The end of the text.
        pub fn finish(&mut self) -> (usize, usize) {
            let step = self.0.finish();
            (step.text.len(), step.hits.len())
        }

        /// Scan the next piece; what it let through.
        pub fn push_scanned(&mut self, piece: &str) -> Scanned {
            scanned(self.0.push(piece))
        }

        /// The end of the text; what the rest let through.
        pub fn finish_scanned(&mut self) -> Scanned {
            scanned(self.0.finish())
        }

        /// Bytes received and not let through yet.
        pub fn held(&self) -> usize {
            self.0.held()
        }
    }

    /// These checks' output stage over a whole text at once (no work budget).
    pub fn scan_whole(checks: Vec<Check>, text: &str) -> Scanned {
        scan_budgeted(checks, text, usize::MAX).0
    }

    /// These checks' output stage over a whole text at once, each check examining at most `max_candidates`
    /// candidate matches (`usize::MAX`: no bound; the layer's default is [`DEFAULT`]); what it let through and
    /// the candidates examined.
    pub fn scan_budgeted(
        checks: Vec<Check>,
        text: &str,
        max_candidates: usize,
    ) -> (Scanned, usize) {
        let policy = Policy::new(checks, Arc::from(""), max_candidates);
        let mut budget = Budget::new(max_candidates);
        let step = StreamScanner::scan_whole(policy.output.scan.clone(), text, &mut budget);
        (scanned(step), budget.spent())
    }

    /// The layer's default work budget per check (see `GuardrailLayer::max_candidates`).
    pub const DEFAULT: usize = DEFAULT_MAX_CANDIDATES;
}
