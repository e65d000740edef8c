//! What an answer carries in its provider's own format besides whole blocks: the citations of a text block, a
//! stream event of a type no layer models, fields of an answer the core has no place for.
//!
//! Like [`ChatEvent::ProviderBlock`](crate::ChatEvent::ProviderBlock), these travel in the event stream as the
//! provider sent them: a client speaking the provider's format gets them back in their place; other formats,
//! collected responses and records leave them out (a gateway logs each at `debug`), because no other format has
//! a place to put them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One piece of an answer in its provider's format (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProviderExtra {
    /// The provider's text block in progress ends here, with these citations (Anthropic's `citations` of a text
    /// block, each as sent). Anthropic keeps cited text in blocks of its own, so two text blocks in a row end
    /// the first with this even without citations: a client of the format gets the blocks apart, others get
    /// the text joined.
    TextBlockEnd {
        /// The block's citations, in order (empty when the block only ends).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        citations: Vec<Value>,
    },
    /// A stream event of a type no layer models, whole (its `type` names it).
    Event {
        /// The event's data.
        event: Value,
    },
    /// Fields of the answer no layer models (Chat Completions' message `annotations`, a provider's extras on a
    /// choice), as sent; in a stream, those of one chunk.
    Fields {
        /// Fields of the message (a streamed chunk's `delta`).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        message: Map<String, Value>,
        /// Fields of the choice beside it.
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        choice: Map<String, Value>,
    },
}

impl ProviderExtra {
    /// A stable name of the kind (for logs).
    pub fn kind(&self) -> &'static str {
        match self {
            ProviderExtra::TextBlockEnd { .. } => "text_block_end",
            ProviderExtra::Event { .. } => "event",
            ProviderExtra::Fields { .. } => "fields",
        }
    }
}
