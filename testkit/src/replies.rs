//! Provider replies for [`ScriptedProvider`](tower_chat::test_server::ScriptedProvider) that more than one
//! suite needs.

use std::time::Duration;

use serde_json::json;
use tower_chat::test_server::{Part, Reply};

/// An error reply with an OpenAI-style body (`scripted <code>`, type `server_error`).
pub fn status(code: u16) -> Reply {
    Reply::json(
        code,
        json!({"error": {"message": format!("scripted {code}"), "type": "server_error"}}),
    )
}

/// An Anthropic Messages answer of `text` from `model` (streamed, or one message to a non-streaming request).
pub fn anthropic_text(model: &str, text: &str) -> Reply {
    Reply::anthropic_stream(&[
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":model,"content":[],"usage":{"input_tokens":10,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}),
        json!({"type":"message_stop"}),
    ])
}

/// An SSE reply that sends `chunks` and then breaks the connection.
pub fn cut_after<I, B>(chunks: I) -> Reply
where
    I: IntoIterator<Item = B>,
    B: Into<String>,
{
    // The pause lets the chunks reach the client before the abort tears the connection down.
    Reply::sse_chunks(chunks.into_iter().map(Into::into).collect::<Vec<String>>())
        .then(Part::Pause(Duration::from_millis(20)))
        .then(Part::Abort)
}
