//! Turning the stack's event stream into what the client asked for, in any wire format: a shared translator
//! decides what the client may see (server-side tool calls and their results are hidden; the client's own calls
//! are shown, renumbered from 0 per round), and a format's [`Encoder`] writes it — one whole answer
//! ([`complete`]), or SSE events ([`stream`]).
//!
//! A turn that ends `awaiting_approval` names its pending approvals (a notice in the text plus the `tower_chat`
//! fields) when the server resumes paused turns ([`ApprovalNotices`]): each notice is one of the stream's
//! [`ChatEvent::ApprovalRequest`]s, under the id the service gave it.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::WaitForCancellationFutureOwned;
use tower_chat::{
    ApprovalRequest, CancellationToken, ChatError, ChatEvent, ChatStream, ErrorKind, FinishReason,
    ProviderExtra,
};

use crate::error::ApiError;
use crate::format::{ApprovalNotice, Encoder, Ending, ExtraFields, Folded, Visible, ROUND_BREAK};

/// Whether a paused turn's answer names its pending approvals, and who decides them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApprovalNotices {
    /// No notice: the answer shows its finish reason (`awaiting_approval`) only, for a server that cannot resume
    /// a paused turn.
    #[default]
    Hidden,
    /// The client decides: the notice asks it to answer with `tower_chat.approvals`.
    ClientDecides,
    /// Operators decide: the notice tells the client to wait for them and resend.
    OperatorsDecide,
}

/// Everything a response needs besides the events.
#[derive(Debug)]
pub struct Turn {
    /// The `model` the client asked for (shown until the upstream names the one that answered).
    pub model: String,
    /// Names of the tools the client declared: only their calls are shown.
    pub client_tools: HashSet<String>,
    /// Whether a paused turn's answer names its pending approvals.
    pub notices: ApprovalNotices,
}

/// Folds events into what the client sees ([`Folded`]).
struct Translator {
    turn: Turn,
    folded: Folded,
    /// Round-local call index → client-visible index, for the client's own calls.
    visible: HashMap<usize, usize>,
    approvals: Vec<ApprovalRequest>,
    /// A tool round ended since the last text: the next text is a later round's.
    round_over: bool,
}

impl Translator {
    fn new(turn: Turn) -> Self {
        Translator {
            folded: Folded {
                model: turn.model.clone(),
                ..Folded::default()
            },
            turn,
            visible: HashMap::new(),
            approvals: Vec::new(),
            round_over: false,
        }
    }

    /// The client-visible index of a newly seen client call.
    fn announce(&mut self, index: usize) -> usize {
        let visible = self.visible.len();
        self.visible.insert(index, visible);
        visible
    }

    fn event(&mut self, event: &ChatEvent, out: &mut Vec<Visible>) {
        match event {
            ChatEvent::ResponseMetadata { model: Some(m), .. } => self.folded.model = m.clone(),
            ChatEvent::TextDelta { text } if !text.is_empty() => {
                if std::mem::take(&mut self.round_over) && !self.folded.content.is_empty() {
                    let folded = &mut self.folded;
                    folded.round_breaks.push(folded.content.len());
                    folded.content.push_str(ROUND_BREAK);
                    out.push(Visible::RoundBreak);
                }
                self.folded.content.push_str(text);
                out.push(Visible::Text(text.clone()));
            }
            ChatEvent::ReasoningDelta { text } if !text.is_empty() => {
                self.folded.reasoning.push_str(text);
                out.push(Visible::Reasoning(text.clone()));
            }
            ChatEvent::ReasoningEnd { continuation } => {
                let folded = &mut self.folded;
                folded.reasoning_parts.push(tower_chat::ReasoningPart {
                    text: folded.reasoning[folded.reasoning_covered..].to_owned(),
                    continuation: Some(continuation.clone()),
                });
                folded.reasoning_covered = folded.reasoning.len();
                out.push(Visible::ReasoningEnd(continuation.clone()));
            }
            ChatEvent::ToolCallStart { index, id, name }
                if self.turn.client_tools.contains(name) =>
            {
                let visible = self.announce(*index);
                out.push(Visible::CallStart {
                    index: visible,
                    id: id.clone(),
                    name: name.clone(),
                });
            }
            ChatEvent::ToolCallDelta { index, arguments } => {
                if let Some(visible) = self.visible.get(index) {
                    out.push(Visible::CallArguments {
                        index: *visible,
                        delta: arguments.clone(),
                    });
                }
            }
            ChatEvent::ToolCallEnd { index, call }
                if self.turn.client_tools.contains(&call.name) =>
            {
                // A provider that sends only complete calls (non-streaming) never announced this one.
                let visible = match self.visible.get(index) {
                    Some(visible) => *visible,
                    None => {
                        let visible = self.announce(*index);
                        out.push(Visible::CallStart {
                            index: visible,
                            id: call.id.clone(),
                            name: call.name.clone(),
                        });
                        out.push(Visible::CallArguments {
                            index: visible,
                            delta: call.arguments.to_wire_string(),
                        });
                        visible
                    }
                };
                self.folded.client_calls.push(call.clone());
                out.push(Visible::CallEnd {
                    index: visible,
                    call: call.clone(),
                });
            }
            ChatEvent::ToolResult { .. } => {
                // Results come between rounds; the next round numbers its calls from 0 again.
                self.visible.clear();
                self.round_over = true;
            }
            ChatEvent::ApprovalRequest { request }
                if self.turn.notices != ApprovalNotices::Hidden =>
            {
                self.approvals.push(ApprovalRequest::clone(request))
            }
            ChatEvent::Usage { usage } => self.folded.usage.add(usage),
            ChatEvent::ProviderBlock { format, block } => {
                self.folded
                    .provider_blocks
                    .push(crate::format::PlacedBlock {
                        at: self.folded.content.len(),
                        format: *format,
                        block: block.clone(),
                    });
                out.push(Visible::ProviderBlock {
                    format: *format,
                    block: block.clone(),
                });
            }
            ChatEvent::ProviderExtra { format, extra } => {
                let folded = &mut self.folded;
                match extra {
                    ProviderExtra::TextBlockEnd { citations } => folded.text_block_ends.push((
                        folded.content.len(),
                        *format,
                        citations.clone(),
                    )),
                    ProviderExtra::Fields { message, choice } => {
                        let at = match folded.extra_fields.iter().position(|(f, _)| f == format) {
                            Some(at) => at,
                            None => {
                                folded.extra_fields.push((*format, ExtraFields::default()));
                                folded.extra_fields.len() - 1
                            }
                        };
                        let fields = &mut folded.extra_fields[at].1;
                        ExtraFields::merge(&mut fields.message, message);
                        ExtraFields::merge(&mut fields.choice, choice);
                    }
                    // A stream event stands for itself: a whole answer has no place for it.
                    _ => {}
                }
                out.push(Visible::ProviderExtra {
                    format: *format,
                    extra: extra.clone(),
                });
            }
            _ => {}
        }
    }

    /// The turn ended with `reason`: a pause names the approvals it waits for.
    fn end(&mut self, reason: FinishReason) -> Ending {
        let notices = if reason == FinishReason::AwaitingApproval {
            self.approvals.iter().map(ApprovalNotice::of).collect()
        } else {
            Vec::new()
        };
        Ending {
            reason,
            notices,
            operators_decide: self.turn.notices == ApprovalNotices::OperatorsDecide,
        }
    }
}

/// The whole response as one JSON object, in `encoder`'s format.
pub async fn complete<E: Encoder>(
    stream: ChatStream,
    turn: Turn,
    mut encoder: E,
) -> Result<Vec<u8>, ApiError> {
    let mut translator = Translator::new(turn);
    let mut stream = stream;
    let mut finish = None;
    let mut ignored = Vec::new();
    while let Some(item) = stream.next().await {
        let event = item.map_err(|e| ApiError::from_chat(&e))?;
        translator.event(&event, &mut ignored);
        ignored.clear();
        if let ChatEvent::Finish { reason } = event {
            finish = Some(reason);
        }
    }
    let Some(reason) = finish else {
        return Err(ApiError::from_chat(&incomplete()));
    };
    let ending = translator.end(reason);
    Ok(encoder.whole(std::mem::take(&mut translator.folded), &ending))
}

fn incomplete() -> ChatError {
    ChatError::new(
        ErrorKind::Protocol,
        "the response ended without a finish reason",
    )
}

struct SseState<E> {
    stream: ChatStream,
    translator: Translator,
    encoder: E,
    first: Option<ChatEvent>,
    /// Resolves when the gateway's drain time is over: the stream ends with an error event.
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    opened: bool,
    done: bool,
}

impl<E: Encoder> SseState<E> {
    fn open(&mut self, out: &mut Vec<u8>) {
        if !self.opened {
            self.opened = true;
            self.encoder.open(&self.translator.folded, out);
        }
    }
}

/// The response as SSE events in `encoder`'s format. `first` is the stream's first event, already taken (so
/// that an error before anything was sent could still become an HTTP status). The stream opens when the first
/// visible event arrives (so the opening event names the model that answered), and ends after the format's
/// closing events or its error event. When `cut` is cancelled (a server's drain time ran out) while the stream
/// waits for its next event, it ends with the format's error event, code `shutting_down`.
pub fn stream<E: Encoder>(
    stream: ChatStream,
    first: ChatEvent,
    turn: Turn,
    encoder: E,
    cut: CancellationToken,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let state = SseState {
        stream,
        translator: Translator::new(turn),
        encoder,
        first: Some(first),
        cut: Box::pin(cut.cancelled_owned()),
        opened: false,
        done: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.done {
            return None;
        }
        let mut visible = Vec::new();
        // Room for a typical event (a chunk is ~200 bytes) so serialising it does not grow the buffer step by
        // step.
        let mut out = Vec::with_capacity(512);
        loop {
            let item = match state.first.take() {
                Some(event) => Some(Ok(event)),
                None if out.is_empty() => {
                    let next = tokio::select! {
                        biased;
                        item = state.stream.next() => Some(item),
                        () = state.cut.as_mut() => None,
                    };
                    match next {
                        Some(item) => item,
                        None => {
                            state.open(&mut out);
                            state.encoder.error(&ApiError::shutting_down(), &mut out);
                            state.done = true;
                            return Some((Ok(Bytes::from(out)), state));
                        }
                    }
                }
                // Events that are already there go out in the same body frame: one write for a burst (an
                // upstream read that carried several chunks) instead of one per event. Nothing waits for them.
                None => match state.stream.next().now_or_never() {
                    Some(item) => item,
                    None => return Some((Ok(Bytes::from(out)), state)),
                },
            };
            match item {
                Some(Ok(ChatEvent::Finish { reason })) => {
                    state.open(&mut out);
                    let ending = state.translator.end(reason);
                    state
                        .encoder
                        .close(&state.translator.folded, &ending, &mut out);
                    state.done = true;
                    return Some((Ok(Bytes::from(out)), state));
                }
                Some(Ok(event)) => {
                    state.translator.event(&event, &mut visible);
                    for piece in visible.drain(..) {
                        state.open(&mut out);
                        state
                            .encoder
                            .visible(&state.translator.folded, piece, &mut out);
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(error = %error, "chat stream failed after the response started");
                    state.open(&mut out);
                    let error = ApiError::from_chat(&error);
                    state.encoder.error(&error, &mut out);
                    state.done = true;
                    return Some((Ok(Bytes::from(out)), state));
                }
                None => {
                    state.open(&mut out);
                    let error = ApiError::from_chat(&incomplete());
                    state.encoder.error(&error, &mut out);
                    state.done = true;
                    return Some((Ok(Bytes::from(out)), state));
                }
            }
            if out.len() >= FRAME_LIMIT {
                return Some((Ok(Bytes::from(out)), state));
            }
        }
    })
}

/// The most bytes of ready events gathered into one body frame.
const FRAME_LIMIT: usize = 16 * 1024;

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};
    use tower::{Layer, ServiceExt};
    use tower_chat::{ChatRequest, Message, ResponseFormat};
    use tower_chat_structured_output::StructuredOutputLayer;

    use super::*;
    use crate::anthropic_messages::AnthropicMessages;
    use crate::chat_completions::ChatCompletions;
    use crate::format::{ParseContext, WireFormat};
    use crate::responses::Responses;
    use crate::{RequestLimits, UpstreamFormat};

    const ANSWER: &str = r#"{"city": "Oslo", "population": 709000}"#;

    /// The events of a checked JSON answer in 4-byte deltas, with or without the answer parsed so far.
    async fn answer_events(partial_answers: bool) -> Vec<ChatEvent> {
        let leaf = tower::service_fn(|_request: ChatRequest| async {
            let mut events: Vec<Result<ChatEvent, ChatError>> = ANSWER
                .as_bytes()
                .chunks(4)
                .map(|delta| Ok(ChatEvent::text(std::str::from_utf8(delta).unwrap())))
                .collect();
            events.push(Ok(ChatEvent::finish(FinishReason::Stop)));
            Ok::<ChatStream, ChatError>(Box::pin(futures_util::stream::iter(events)))
        });
        let mut request = ChatRequest::new(vec![Message::user("?")]);
        request.options.response_format = Some(ResponseFormat::JsonObject);
        StructuredOutputLayer::new()
            .partial_answers(partial_answers)
            .layer(leaf)
            .oneshot(request)
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await
    }

    fn turn() -> Turn {
        Turn {
            model: "m".into(),
            client_tools: HashSet::new(),
            notices: ApprovalNotices::Hidden,
        }
    }

    fn encoder<F: WireFormat>(body: &Value) -> F::Encoder {
        let context = ParseContext {
            upstream: UpstreamFormat::OpenAi,
            limits: RequestLimits::DEFAULT,
            stores_responses: false,
        };
        F::parse(body.to_string().as_bytes(), &context).unwrap().1
    }

    /// `events` as `F`'s SSE body and as its whole answer.
    async fn answered<F: WireFormat>(body: &Value, events: Vec<ChatEvent>) -> (String, String) {
        let mut rest = events.clone().into_iter();
        let first = rest.next().unwrap();
        let rest: ChatStream = Box::pin(futures_util::stream::iter(rest.map(Ok)));
        let frames: Vec<Bytes> = stream(
            rest,
            first,
            turn(),
            encoder::<F>(body),
            CancellationToken::new(),
        )
        .map(Result::unwrap)
        .collect()
        .await;
        let events: ChatStream = Box::pin(futures_util::stream::iter(events.into_iter().map(Ok)));
        let whole = complete(events, turn(), encoder::<F>(body)).await.unwrap();
        (
            String::from_utf8(frames.concat()).unwrap(),
            String::from_utf8(whole).unwrap(),
        )
    }

    /// Whether `body` shows a value of the answer as JSON of its own (not as the answer's text, which is escaped).
    fn shows_a_value(body: &str) -> bool {
        body.contains("partial_answer") || body.contains(r#"{"city":"#)
    }

    #[tokio::test]
    async fn partial_answers_reach_no_wire_format() {
        let (plain, growing) = (answer_events(false).await, answer_events(true).await);
        let partials = growing
            .iter()
            .filter(|e| matches!(e, ChatEvent::PartialAnswer { .. }))
            .count();
        assert!(partials > 3, "{growing:?}");
        let user = json!([{"role": "user", "content": "?"}]);
        let bodies = [
            json!({"model": "m", "stream": true, "messages": user}),
            json!({"model": "m", "stream": true, "max_tokens": 8, "messages": user}),
            json!({"model": "m", "stream": true, "input": "?"}),
        ];
        for (format, body) in ["chat_completions", "messages", "responses"]
            .into_iter()
            .zip(bodies)
        {
            let run = |events: Vec<ChatEvent>| {
                let body = body.clone();
                async move {
                    match format {
                        "chat_completions" => answered::<ChatCompletions>(&body, events).await,
                        "messages" => answered::<AnthropicMessages>(&body, events).await,
                        _ => answered::<Responses>(&body, events).await,
                    }
                }
            };
            let (sse_plain, whole_plain) = run(plain.clone()).await;
            let (sse, whole) = run(growing.clone()).await;
            assert!(
                !shows_a_value(&sse) && !shows_a_value(&whole),
                "{format}: {sse}\n{whole}"
            );
            // The same events, one per text delta, as without the values.
            assert_eq!(
                sse.matches("\n\n").count(),
                sse_plain.matches("\n\n").count(),
                "{format}: {sse}"
            );
            assert_eq!(
                whole.matches("709000").count(),
                whole_plain.matches("709000").count()
            );
            assert!(
                whole.contains(r#"\"population\": 709000}"#),
                "{format}: {whole}"
            );
        }
    }
}
