//! [`Screening`]: the answer as a content policy outside the layer lets the client see it, folded into the
//! record instead of the answer as the upstream sent it (see [`tower_chat::GuardedCall`]).
//!
//! Text (and reasoning) goes through the policy's screen before the [`ResponseBuilder`] sees it, so a redacted
//! span is kept redacted, and a blocked answer keeps the text before the match and the policy's notice — the
//! withheld text is never part of the record, not even of a partial one written when the stream is dropped.
//! Text the screen still holds back when the stream is dropped is not kept: the client never saw it.

use tower_chat::{
    AnswerScreen, ChatEvent, FinishReason, GuardedCall, GuardrailAction, GuardrailVerdict,
    ResponseBuilder,
};

/// The screens of one recorded answer.
#[derive(Debug)]
pub(crate) struct Screening {
    guarded: GuardedCall,
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
}

impl Screening {
    /// The screening a policy outside asked for, if it checks the answer's text.
    pub(crate) fn of(guarded: &GuardedCall) -> Option<Self> {
        // Asked once up front: a policy without answer checks has no screen to give.
        guarded.screen()?;
        Some(Screening {
            guarded: guarded.clone(),
            text: None,
            reasoning: None,
            reasoning_redacted: false,
            verdicts: Vec::new(),
            withheld: false,
        })
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
                let screen = self
                    .text
                    .get_or_insert_with(|| self.guarded.screen().expect("a screening has screens"));
                let screened = screen.push(text);
                self.keep(screened, "output", builder, false);
            }
            ChatEvent::ReasoningDelta { text } => {
                let screen = self
                    .reasoning
                    .get_or_insert_with(|| self.guarded.screen().expect("a screening has screens"));
                let screened = screen.push(text);
                self.keep(screened, "reasoning", builder, true);
            }
            ChatEvent::ReasoningEnd { .. } => {
                self.end_reasoning(builder);
                if !std::mem::take(&mut self.reasoning_redacted) && !self.withheld {
                    builder.push(event);
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

    /// The texts ended (another event, the stream's end or error): what was held back is decided.
    pub(crate) fn end_texts(&mut self, builder: &mut ResponseBuilder) {
        self.end_reasoning(builder);
        if let Some(mut screen) = self.text.take() {
            let screened = screen.finish();
            self.keep(screened, "output", builder, false);
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
