//! [`Screening`]: the answer as a content policy outside the layer lets the client see it, folded into the
//! record instead of the answer as the upstream sent it (see [`tower_chat::GuardedCall`]).
//!
//! Text (and reasoning) goes through the policy's screen before the [`ResponseBuilder`] sees it, so a redacted
//! span is kept redacted, and a blocked answer keeps the text before the match and the policy's notice — the
//! withheld text is never part of the record, not even of a partial one written when the stream is dropped.
//! Text the screen still holds back when the stream is dropped is not kept: the client never saw it.
//!
//! A tool call is kept as the policy sends it on: its start and argument fragments are not kept (the policy
//! holds the fragments back while it checks calls, and a call blocked or cut midway must not leave its
//! arguments behind), the complete call is kept with its arguments redacted, and a blocked call is not kept:
//! the answer ends with the notice.
//! When the policy judges texts whole (moderation, a schema), a text's screened pieces are held instead of kept
//! until the text ends; [`Screening::judge`] then hands back the text's judgement, which the recording stream
//! awaits before it lets the event that ended the text by, and [`Screening::keep_judged`] keeps what it let
//! through: the text, redacted, or the block's notice (the answer withheld, as for a pattern's block). A stream
//! dropped before then keeps none of the text: the client saw none of it. A tool call or result the policy
//! judges whole waits for its judgement the same way, and is kept as it lets it through.
//! The messages a tool loop inside added to a later round's request (the calls, their results, the text and
//! reasoning before them) are kept as the client saw them too ([`screen_request`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::FutureExt;
use tower_chat::{
    AnswerScreen, CallScreens, ChatEvent, FinishReason, GuardedCall, GuardrailAction,
    GuardrailVerdict, JudgedText, Message, ResponseBuilder, Screened, ToolCall, ToolMessage,
};

/// A judgement the recording stream awaits before it handles the item that asked for it
/// ([`Screening::judge`]).
pub(crate) type Judging = Pin<Box<dyn Future<Output = Judged> + Send>>;

/// What a judgement decided: about the text that ended, or the complete tool call or result.
#[derive(Debug)]
pub(crate) enum Judged {
    Text(Screened),
    ToolCall(Option<ToolCall>, Screened),
    ToolResult(Option<ToolMessage>, Screened),
}

/// The screens of one recorded answer.
#[derive(Debug)]
pub(crate) struct Screening {
    screens: Arc<dyn CallScreens>,
    /// The current text's screen (a new one after each event that ends a text).
    text: Option<Box<dyn AnswerScreen>>,
    /// The current reasoning block's screen.
    reasoning: Option<Box<dyn AnswerScreen>>,
    /// A check redacted the current reasoning block: its provider's signature no longer matches, so its end
    /// (which carries it) is left out, as the policy leaves it out of what it sends on.
    reasoning_redacted: bool,
    pub(crate) verdicts: Vec<GuardrailVerdict>,
    /// A check withheld the rest of the answer: nothing more is kept.
    pub(crate) withheld: bool,
    /// The policy judges each text whole: the current text's screened pieces, held until it is judged.
    whole: Option<String>,
    /// The judgement of the tool call or result being handled, when the policy judged it whole.
    judged_tool: Option<Judged>,
}

impl Screening {
    /// The screening a policy outside asked for, if it checks the answer's text.
    pub(crate) fn of(guarded: &GuardedCall) -> Option<Self> {
        let screens = guarded.screens()?.clone();
        Some(Screening {
            whole: screens.judges_text_whole().then(String::new),
            screens,
            text: None,
            reasoning: None,
            reasoning_redacted: false,
            verdicts: Vec::new(),
            withheld: false,
            judged_tool: None,
        })
    }

    /// The judgement `event` (`None`: the stream's end) must wait for before it is observed: of the text it
    /// ends, when the policy judges texts whole; else of the tool call or result it is, when the policy judges
    /// those whole.
    pub(crate) fn judge(
        &mut self,
        event: Option<&ChatEvent>,
        builder: &mut ResponseBuilder,
    ) -> Option<Judging> {
        if let Some(text) = self.end_whole(event, builder) {
            return Some(Box::pin(text.map(Judged::Text)));
        }
        if self.withheld || self.judged_tool.is_some() {
            return None;
        }
        match event? {
            ChatEvent::ToolCallEnd { call, .. } => {
                let judging = self.screens.judge_tool_call(call)?;
                Some(Box::pin(
                    judging.map(|(call, screened)| Judged::ToolCall(call, screened)),
                ))
            }
            ChatEvent::ToolResult { result } => {
                let judging = self.screens.judge_tool_result(result)?;
                Some(Box::pin(judging.map(|(result, screened)| {
                    Judged::ToolResult(result, screened)
                })))
            }
            _ => None,
        }
    }

    /// Keep what a judgement let through: a text's now, a tool call's or result's when it is observed.
    pub(crate) fn keep_judged(&mut self, judged: Judged, builder: &mut ResponseBuilder) {
        match judged {
            Judged::Text(screened) => self.keep(screened, "output", builder, false),
            tool => self.judged_tool = Some(tool),
        }
    }

    /// The judgement of the text that `event` (`None`: the stream's end) ends, when the policy judges texts
    /// whole and one was held: any event but a text delta ends it, except a value of the answer so far (the
    /// policy neither sends that on nor ends its text there). The screen's last decisions are taken first: a
    /// pattern's block decided there keeps the held text and the notice, as the policy sends them.
    fn end_whole(
        &mut self,
        event: Option<&ChatEvent>,
        builder: &mut ResponseBuilder,
    ) -> Option<JudgedText> {
        let held = self.whole.as_ref()?;
        if self.withheld
            || matches!(
                event,
                Some(ChatEvent::TextDelta { .. } | ChatEvent::PartialAnswer { .. })
            )
            || (held.is_empty() && self.text.is_none())
        {
            return None;
        }
        if let Some(mut screen) = self.text.take() {
            let screened = screen.finish();
            self.hold(screened, builder);
        }
        let held = std::mem::take(self.whole.as_mut()?);
        (!self.withheld && !held.is_empty()).then(|| self.screens.judge_text(held))
    }

    /// Hold a text's screened piece for its judgement; a pattern's block ends the text here, and what was held
    /// goes on unjudged before the notice, as the policy sends it.
    fn hold(&mut self, mut screened: Screened, builder: &mut ResponseBuilder) {
        let Some(held) = &mut self.whole else {
            return;
        };
        if screened.withheld.is_none() {
            held.push_str(&screened.text);
            screened.text.clear();
        } else {
            screened.text.insert_str(0, &std::mem::take(held));
        }
        self.keep(screened, "output", builder, false);
    }

    /// Fold `event` into `builder` as the client is let see it.
    pub(crate) fn observe(&mut self, event: &ChatEvent, builder: &mut ResponseBuilder) {
        if self.withheld {
            // The usage the upstream reports still counts; the answer's finish is the policy's.
            if let ChatEvent::Usage { .. } = event {
                builder.push(event);
            }
            return;
        }
        match event {
            ChatEvent::TextDelta { text } => {
                let screen = self.text.get_or_insert_with(|| self.screens.text());
                let screened = screen.push(text);
                if self.whole.is_some() {
                    self.hold(screened, builder);
                } else {
                    self.keep(screened, "output", builder, false);
                }
            }
            ChatEvent::ReasoningDelta { text } => {
                let screen = self
                    .reasoning
                    .get_or_insert_with(|| self.screens.reasoning());
                let screened = screen.push(text);
                self.keep(screened, "reasoning", builder, true);
            }
            ChatEvent::ReasoningEnd { .. } => {
                self.end_reasoning(builder);
                if !std::mem::take(&mut self.reasoning_redacted) && !self.withheld {
                    builder.push(event);
                }
            }
            // A value of the answer so far is not part of the record, and ends no text: the policy, which does
            // not send it on, does not end a text there either.
            ChatEvent::PartialAnswer { .. } => {}
            // A call is kept whole when it ends, as the policy let it through.
            ChatEvent::ToolCallStart { .. } | ChatEvent::ToolCallDelta { .. } => {
                self.end_texts(builder)
            }
            ChatEvent::ToolCallEnd { index, call } => {
                self.end_texts(builder);
                if self.withheld {
                    return;
                }
                let (call, screened) = match self.judged_tool.take() {
                    Some(Judged::ToolCall(call, screened)) => (call, screened),
                    _ => {
                        let mut call = call.clone();
                        let screened = self.screens.tool_call(&mut call);
                        (Some(call), screened)
                    }
                };
                if let (true, Some(call)) = (self.kept_whole(screened, builder), call) {
                    builder.push(&ChatEvent::ToolCallEnd {
                        index: *index,
                        call,
                    });
                }
            }
            ChatEvent::ToolResult { result } => {
                self.end_texts(builder);
                if self.withheld {
                    return;
                }
                let (result, screened) = match self.judged_tool.take() {
                    Some(Judged::ToolResult(result, screened)) => (result, screened),
                    _ => {
                        let mut result = result.clone();
                        let screened = self.screens.tool_result(&mut result);
                        (Some(result), screened)
                    }
                };
                if let (true, Some(result)) = (self.kept_whole(screened, builder), result) {
                    builder.push(&ChatEvent::ToolResult { result });
                }
            }
            _ => {
                self.end_texts(builder);
                if !self.withheld {
                    builder.push(event);
                }
            }
        }
    }

    /// Keep what a screen of a whole tool call or result decided; `false` when it blocked (the answer ended with
    /// its notice, and the call or result is not kept).
    fn kept_whole(&mut self, screened: Screened, builder: &mut ResponseBuilder) -> bool {
        self.verdicts.extend(screened.verdicts);
        if screened.withheld.is_none() {
            return true;
        }
        self.withheld = true;
        builder.push(&ChatEvent::TextDelta {
            text: screened.text,
        });
        builder.push(&ChatEvent::finish(FinishReason::ContentFilter));
        false
    }

    /// The texts ended (another event, the stream's end or error): what was held back is decided.
    pub(crate) fn end_texts(&mut self, builder: &mut ResponseBuilder) {
        self.end_reasoning(builder);
        if let Some(mut screen) = self.text.take() {
            let screened = screen.finish();
            if self.whole.is_some() {
                // Unjudged, the text is not kept (only a pattern's block and its notice are).
                self.hold(screened, builder);
            } else {
                self.keep(screened, "output", builder, false);
            }
        }
    }

    fn end_reasoning(&mut self, builder: &mut ResponseBuilder) {
        if let Some(mut screen) = self.reasoning.take() {
            let screened = screen.finish();
            self.keep(screened, "reasoning", builder, true);
        }
    }

    fn keep(
        &mut self,
        screened: tower_chat::Screened,
        location: &str,
        builder: &mut ResponseBuilder,
        reasoning: bool,
    ) {
        for mut verdict in screened.verdicts {
            location.clone_into(&mut verdict.location);
            if reasoning && verdict.action == GuardrailAction::Redact {
                self.reasoning_redacted = true;
            }
            self.verdicts.push(verdict);
        }
        if !screened.text.is_empty() {
            builder.push(&if reasoning && screened.withheld.is_none() {
                ChatEvent::ReasoningDelta {
                    text: screened.text,
                }
            } else {
                // A block's notice is answer text, wherever the block was found.
                ChatEvent::TextDelta {
                    text: screened.text,
                }
            });
        }
        if screened.withheld.is_some() {
            self.withheld = true;
            self.text = None;
            self.reasoning = None;
            builder.push(&ChatEvent::finish(FinishReason::ContentFilter));
        }
    }
}

/// The request of a later round as the client saw it: the messages a tool loop inside added after the request
/// the policy checked (the assistant's text, reasoning and calls, the tools' results) passed through the
/// policy's screens. `None` when nothing changed. The verdicts returned are the tool results' (a call's were
/// kept with the round that made it, the text's with the round that said it).
pub(crate) fn screen_request(
    guarded: &GuardedCall,
    messages: &[Message],
) -> Option<(Vec<Message>, Vec<GuardrailVerdict>)> {
    let screens = guarded.screens()?;
    let checked = guarded.checked_message_count()?;
    if messages.len() <= checked {
        return None;
    }
    let mut kept = messages.to_vec();
    let mut verdicts = Vec::new();
    let mut changed = false;
    for message in &mut kept[checked..] {
        match message {
            Message::Assistant(assistant) => {
                let before = assistant.clone();
                if !assistant.content.is_empty() {
                    let screened = whole_text(screens.reasoning(), &assistant.content);
                    assistant.content = if screens.judges_text_whole() {
                        // As the text's judgement let it through; a text it no longer holds (or that was
                        // judged in parts) is not kept, since what the client saw of it is not known.
                        screens
                            .judged_text(&screened)
                            .map(|judged| judged.text)
                            .unwrap_or_default()
                    } else {
                        screened
                    };
                }
                for part in &mut assistant.reasoning {
                    if part.text.is_empty() {
                        continue;
                    }
                    let text = whole_text(screens.reasoning(), &part.text);
                    if text != part.text {
                        // The policy sent a redacted block on without what its provider needs to continue from it.
                        part.text = text;
                        part.continuation = None;
                    }
                }
                for call in &mut assistant.tool_calls {
                    if screens.tool_call(call).withheld.is_some() {
                        call.arguments = tower_chat::ToolArguments::Json(serde_json::json!({}));
                    }
                }
                changed |= *assistant != before;
            }
            Message::Tool(result) => {
                let before = result.clone();
                let screened = screens.tool_result(result);
                verdicts.extend(screened.verdicts);
                if let Some(_check) = screened.withheld {
                    result.content = tower_chat::Content::text(screened.text);
                }
                changed |= *result != before;
            }
            _ => {}
        }
    }
    (changed || !verdicts.is_empty()).then_some((kept, verdicts))
}

/// One whole text through `screen`: what it lets through (a block's notice ending it).
fn whole_text(mut screen: Box<dyn AnswerScreen>, text: &str) -> String {
    let mut kept = screen.push(text).text;
    kept.push_str(&screen.finish().text);
    kept
}
