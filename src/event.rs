//! The events a chat call streams back.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::approval::ApprovalRequest;
use crate::carried::ApiFormat;
use crate::message::{ToolCall, ToolMessage};
use crate::provider_extra::ProviderExtra;
use crate::reasoning::Continuation;

/// One event of a chat response stream.
///
/// A model response streams as: an optional [`ChatEvent::ResponseMetadata`], text / reasoning deltas and tool-call
/// fragments in the provider's order, a [`ChatEvent::ToolCallEnd`] per complete call, at most one
/// [`ChatEvent::Usage`], and one [`ChatEvent::Finish`] last. Tool loops add [`ChatEvent::ToolResult`] and
/// [`ChatEvent::ApprovalRequest`] between rounds. A structured-output layer adds [`ChatEvent::AnswerRejected`]
/// before each repair and, when asked to, [`ChatEvent::PartialAnswer`] after text deltas that made a JSON answer
/// grow (the last one before the `Finish` is the validated answer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChatEvent {
    /// The provider's id and the model that actually answered.
    ResponseMetadata {
        /// The provider's response id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The model that answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// A piece of answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of reasoning text.
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// The reasoning streamed since the last `ReasoningEnd` is one complete block, and this is what its provider
    /// needs to continue from it (an Anthropic signature, redacted thinking, an OpenAI reasoning item).
    ReasoningEnd {
        /// The provider's continuation data, as received.
        continuation: Continuation,
    },
    /// The model started a tool call.
    ToolCallStart {
        /// Position of the call within this model response (0, 1, …).
        index: usize,
        /// The provider's call id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// A fragment of a tool call's argument text.
    ToolCallDelta {
        /// Position of the call within this model response.
        index: usize,
        /// The fragment.
        arguments: String,
    },
    /// A tool call is complete; its arguments were joined and parsed once.
    ToolCallEnd {
        /// Position of the call within this model response.
        index: usize,
        /// The complete call.
        call: ToolCall,
    },
    /// A tool loop ran a tool (or refused to) and this is what the model will see.
    ToolResult {
        /// The result.
        result: ToolMessage,
    },
    /// A tool call waits for a human decision.
    ApprovalRequest {
        /// The request (boxed: it is rare and the largest payload, and keeping every event small keeps moving
        /// events cheap).
        request: Box<ApprovalRequest>,
    },
    /// The answer text streamed since the response began (or since the previous `AnswerRejected`) broke the
    /// requested response schema; a structured-output layer asks for it again, and its text is to be discarded
    /// (a collected response keeps only the text after this event).
    AnswerRejected {
        /// What was wrong, one line per violation (`/city: expected string, found integer 7`).
        violations: Vec<String>,
    },
    /// The JSON answer parsed so far, after a text delta that changed it: properties appear as their values
    /// start, strings grow, numbers and literals appear once complete. Emitted by a structured-output layer
    /// only when asked to; it repeats what the text deltas already said, so consumers that read the text (a
    /// collected response, a record, a wire format) ignore it. Not validated until the last one before
    /// [`ChatEvent::Finish`], which is the validated answer; after [`ChatEvent::AnswerRejected`] the values start
    /// again from the new attempt's text.
    PartialAnswer {
        /// The answer so far.
        value: serde_json::Value,
    },
    /// A whole content block of a type no layer models (Anthropic's `server_tool_use`, `web_search_tool_result`,
    /// …), as the provider sent it, in its place among the others. A client speaking the provider's format
    /// gets it back unchanged; other formats, collected responses and records leave it out.
    ProviderBlock {
        /// The format the block is written in.
        format: ApiFormat,
        /// The block.
        block: serde_json::Value,
    },
    /// Something else of the provider's own format the core does not model, in its place: a text block's
    /// citations, a stream event of an unknown type, unknown fields of an answer. A client speaking the
    /// provider's format gets it back; other formats, collected responses and records leave it out.
    ProviderExtra {
        /// The format it is written in.
        format: ApiFormat,
        /// What it is.
        extra: ProviderExtra,
    },
    /// Tokens used, as an increment: consumers sum every `Usage` event of a stream.
    Usage {
        /// The tokens.
        usage: Usage,
    },
    /// The response is over.
    Finish {
        /// Why.
        reason: FinishReason,
    },
}

impl ChatEvent {
    /// A text delta.
    pub fn text(text: impl Into<String>) -> Self {
        ChatEvent::TextDelta { text: text.into() }
    }

    /// A finish event.
    pub fn finish(reason: FinishReason) -> Self {
        ChatEvent::Finish { reason }
    }

    /// A stable name of the event's kind (for logs and metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            ChatEvent::ResponseMetadata { .. } => "response_metadata",
            ChatEvent::TextDelta { .. } => "text_delta",
            ChatEvent::ReasoningDelta { .. } => "reasoning_delta",
            ChatEvent::ReasoningEnd { .. } => "reasoning_end",
            ChatEvent::ToolCallStart { .. } => "tool_call_start",
            ChatEvent::ToolCallDelta { .. } => "tool_call_delta",
            ChatEvent::ToolCallEnd { .. } => "tool_call_end",
            ChatEvent::ToolResult { .. } => "tool_result",
            ChatEvent::ApprovalRequest { .. } => "approval_request",
            ChatEvent::AnswerRejected { .. } => "answer_rejected",
            ChatEvent::PartialAnswer { .. } => "partial_answer",
            ChatEvent::ProviderBlock { .. } => "provider_block",
            ChatEvent::ProviderExtra { .. } => "provider_extra",
            ChatEvent::Usage { .. } => "usage",
            ChatEvent::Finish { .. } => "finish",
        }
    }
}

/// Token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens (including reasoning tokens).
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache (a part of `input_tokens`), where reported: Anthropic's
    /// `cache_read_input_tokens`, OpenAI's `prompt_tokens_details.cached_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    /// Prompt tokens written to the provider's cache (a part of `input_tokens`), where reported: Anthropic's
    /// `cache_creation_input_tokens`, priced at the model's cache-write rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_input_tokens: Option<u64>,
    /// Reasoning tokens, where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// These tokens were spent by an earlier call whose answer a response cache replayed: nothing reached the
    /// provider now, so nothing is owed ([`crate::ModelPrice::cost`] is zero, budgets charge nothing), and the
    /// counts say what the replay saved. A sum ([`Usage::add`]) is marked when every increment in it was.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_response_cache: bool,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Add another increment to this one.
    pub fn add(&mut self, other: &Usage) {
        fn add_opt(a: &mut Option<u64>, b: Option<u64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0) + b);
            }
        }
        // An empty sum takes the increment's origin; after that, one fresh increment makes the sum fresh.
        self.from_response_cache = if *self == Usage::default() {
            other.from_response_cache
        } else {
            self.from_response_cache && other.from_response_cache
        };
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        add_opt(&mut self.cached_input_tokens, other.cached_input_tokens);
        add_opt(
            &mut self.cache_write_input_tokens,
            other.cache_write_input_tokens,
        );
        add_opt(&mut self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// Why a response ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer (or hit a stop sequence its provider does not name: OpenAI-compatible
    /// providers report a stop-sequence hit as a plain stop).
    Stop,
    /// The model emitted one of the request's stop sequences, this one (Anthropic names it).
    StopSequence(String),
    /// The output token limit was reached.
    Length,
    /// The model called tools and the caller must act on them.
    ToolCalls,
    /// The provider filtered the output.
    ContentFilter,
    /// The provider stopped the answer because it recited source material too closely (Gemini's `RECITATION`):
    /// the text so far may be cut mid-sentence.
    Recitation,
    /// The model tried to call a tool but produced a call its provider could not parse (Gemini's
    /// `MALFORMED_FUNCTION_CALL`): no call was made; asking again, or with a simpler schema, usually helps.
    MalformedFunctionCall,
    /// Tool calls wait for approval decisions.
    AwaitingApproval,
    /// The tool loop reached its round or call limit.
    MaxRounds,
    /// A provider reason with no equivalent here, as the provider sent it.
    Other(String),
}

impl FinishReason {
    /// The snake_case name (as OpenAI spells the shared ones).
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::StopSequence(_) => "stop_sequence",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Recitation => "recitation",
            FinishReason::MalformedFunctionCall => "malformed_function_call",
            FinishReason::AwaitingApproval => "awaiting_approval",
            FinishReason::MaxRounds => "max_rounds",
            FinishReason::Other(other) => other,
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_increments_add_up() {
        let mut total = Usage::default();
        total.add(&Usage {
            from_response_cache: false,
            input_tokens: 10,
            output_tokens: 2,
            cached_input_tokens: Some(4),
            reasoning_tokens: None,
            cache_write_input_tokens: Some(6),
        });
        total.add(&Usage {
            from_response_cache: false,
            input_tokens: 5,
            output_tokens: 1,
            cached_input_tokens: None,
            reasoning_tokens: Some(3),
            cache_write_input_tokens: None,
        });
        assert_eq!(total.input_tokens, 15);
        assert_eq!(total.total_tokens(), 18);
        assert_eq!(total.cached_input_tokens, Some(4));
        assert_eq!(total.reasoning_tokens, Some(3));
        assert_eq!(total.cache_write_input_tokens, Some(6));
    }

    #[test]
    fn a_sum_is_from_the_response_cache_only_when_every_increment_was() {
        let replayed = Usage {
            input_tokens: 3,
            from_response_cache: true,
            ..Usage::default()
        };
        let fresh = Usage {
            input_tokens: 2,
            ..Usage::default()
        };
        let mut all_replayed = Usage::default();
        all_replayed.add(&replayed);
        all_replayed.add(&replayed);
        assert!(all_replayed.from_response_cache);
        assert_eq!(all_replayed.input_tokens, 6);
        for order in [[replayed, fresh], [fresh, replayed]] {
            let mut mixed = Usage::default();
            order.iter().for_each(|u| mixed.add(u));
            assert!(!mixed.from_response_cache, "{order:?}");
        }
        // Serialised only when set, so provider usage reads as it always did.
        assert!(!serde_json::to_string(&fresh)
            .unwrap()
            .contains("from_response_cache"));
        let text = serde_json::to_string(&replayed).unwrap();
        assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), replayed);
    }

    #[test]
    fn events_serialize_with_a_type_tag() {
        let text = serde_json::to_string(&ChatEvent::finish(FinishReason::MaxRounds)).unwrap();
        assert_eq!(text, r#"{"type":"finish","reason":"max_rounds"}"#);
        let back: ChatEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ChatEvent::finish(FinishReason::MaxRounds));
        let partial = ChatEvent::PartialAnswer {
            value: serde_json::json!({"name": "Os"}),
        };
        let text = serde_json::to_string(&partial).unwrap();
        assert_eq!(text, r#"{"type":"partial_answer","value":{"name":"Os"}}"#);
        assert_eq!(serde_json::from_str::<ChatEvent>(&text).unwrap(), partial);
    }
}
