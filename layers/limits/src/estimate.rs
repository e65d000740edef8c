//! The input tokens of a request, estimated before it is sent.

use tower_chat::{ChatRequest, Message};

/// The input tokens of `request`, estimated: its characters (messages, reasoning, tool calls and results, tool
/// specs) over `chars_per_token` (the limits layer's default is 4), each media part's estimate
/// ([`crate::media`]: an image by its pixel size, other media by their bytes), and a few tokens of framing per
/// message. It is what the limits layer reserves before a call; the gateway also answers token-count requests
/// with it where no upstream counts.
///
/// ```
/// use tower_chat::{ChatRequest, Message};
/// use tower_chat_limits::estimate_input_tokens;
///
/// let request = ChatRequest::new(vec![Message::user("How many tokens is this?")]);
/// // 24 characters over 4, and 4 tokens of framing for the one message.
/// assert_eq!(estimate_input_tokens(&request, 4), 10);
/// ```
pub fn estimate_input_tokens(request: &ChatRequest, chars_per_token: u32) -> u64 {
    let messages = &request.messages[..];
    let chars_per_token = chars_per_token.max(1);
    /// Per message: role and framing tokens.
    const MESSAGE_OVERHEAD: u64 = 4;
    /// Per tool call or tool spec: its id, its arguments or schema, framing.
    const TOOL_OVERHEAD_CHARS: u64 = 128;
    let mut chars: u64 = 0;
    let mut media: u64 = 0;
    let text_chars = |content: &tower_chat::Content| match content.as_text() {
        Some(text) => text.len() as u64,
        None => content
            .parts()
            .iter()
            .map(|part| match part {
                tower_chat::Part::Text(text) => text.text.len() as u64,
                _ => 0,
            })
            .sum(),
    };
    for message in messages {
        chars += match message {
            Message::System { content } | Message::User { content } => {
                media += crate::media::media_tokens(content, chars_per_token);
                text_chars(content)
            }
            Message::Assistant(a) => {
                a.content.len() as u64
                    + a.reasoning.iter().map(|r| r.text.len() as u64).sum::<u64>()
                    + a.tool_calls
                        .iter()
                        .map(|c| c.name.len() as u64 + TOOL_OVERHEAD_CHARS)
                        .sum::<u64>()
            }
            Message::Tool(t) => {
                media += crate::media::media_tokens(&t.content, chars_per_token);
                text_chars(&t.content) + t.name.len() as u64
            }
        };
    }
    for tool in &request.options.tools {
        chars += (tool.name.len() + tool.description.len()) as u64 + TOOL_OVERHEAD_CHARS;
    }
    chars.div_ceil(u64::from(chars_per_token)) + media + MESSAGE_OVERHEAD * messages.len() as u64
}
