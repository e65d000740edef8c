//! What a content policy outside a recorder tells the recorder inside it: [`GuardedCall`], put into the request's
//! extensions by the guardrail layer for the layers it calls.
//!
//! A recorder inside a guardrail layer (a gateway records every model round inside its tool loop, the policy
//! applies to the whole turn outside it) sees the upstream's answer before the policy does. Told nothing, it
//! would store what the client never saw: a redacted span in clear, the secret that ended a blocked answer.
//! The guardrail therefore hands inward, with the request, the verdicts it gave the request and a factory of
//! [`AnswerScreen`]s; the recorder passes the answer's text through a screen before it keeps any of it, so what
//! it keeps is what the policy lets through — whichever of the two runs first, and without a copy of the
//! withheld text ever being held for the record.
//!
//! Tool calls' arguments and tool results are screened whole ([`CallScreens::tool_call`],
//! [`CallScreens::tool_result`]): the recorder keeps a call's arguments as the client was sent them, and a
//! later round's request (which carries the calls and results a tool loop inside added) as the client saw them.
//!
//! Checks that judge a text only once it is complete (moderation, a JSON schema, a check of your own) decide at
//! the text's end, when the policy's guard sees the event after it, by which time a recorder inside has let
//! that event by. So with such checks ([`CallScreens::judges_text_whole`]) a recorder keeps none of a text
//! while it streams: it holds the text the screens let through until the text ends (any event other than a
//! text delta), has it judged ([`CallScreens::judge_text`]) before it lets the ending event by, and keeps what
//! the judgement lets through. The guard then takes that judgement for the same text instead of judging it
//! again, so both decide once and alike, and neither waits on the other. A policy with such checks of tool
//! calls or results judges a complete call or result the same way ([`CallScreens::judge_tool_call`],
//! [`CallScreens::judge_tool_result`]).
//!
//! ```
//! use std::sync::Arc;
//! use tower_chat::{AnswerScreen, CallScreens, ChatRequest, Content, GuardedCall, Message, Screened};
//! use tower_chat::{ToolCall, ToolMessage};
//!
//! /// Withholds everything from the word "secret" on.
//! #[derive(Debug, Default)]
//! struct UpToSecret(bool);
//! impl AnswerScreen for UpToSecret {
//!     fn push(&mut self, piece: &str) -> Screened {
//!         if self.0 {
//!             return Screened::default();
//!         }
//!         match piece.find("secret") {
//!             Some(at) => {
//!                 self.0 = true;
//!                 Screened { text: piece[..at].into(), withheld: Some("words".into()), ..Screened::default() }
//!             }
//!             None => Screened { text: piece.into(), ..Screened::default() },
//!         }
//!     }
//!     fn finish(&mut self) -> Screened {
//!         Screened::default()
//!     }
//! }
//!
//! #[derive(Debug)]
//! struct Words;
//! impl CallScreens for Words {
//!     fn text(&self) -> Box<dyn AnswerScreen> {
//!         Box::new(UpToSecret::default())
//!     }
//!     fn reasoning(&self) -> Box<dyn AnswerScreen> {
//!         Box::new(UpToSecret::default())
//!     }
//!     fn tool_call(&self, _call: &mut ToolCall) -> Screened {
//!         Screened::default()
//!     }
//!     fn tool_result(&self, _result: &mut ToolMessage) -> Screened {
//!         Screened::default()
//!     }
//! }
//!
//! let guarded = GuardedCall::new(Vec::new(), Some(Arc::new(Words)));
//! let request = ChatRequest::new(vec![Message::user("hi")]).with_extension(guarded);
//! // In the recorder:
//! let screens = request.extensions.get::<GuardedCall>().and_then(GuardedCall::screens).unwrap();
//! let kept = screens.text().push("the secret is 42");
//! assert_eq!((kept.text.as_str(), kept.withheld.as_deref()), ("the ", Some("words")));
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::guardrail::GuardrailVerdict;
use crate::{ToolCall, ToolMessage};

/// What a screen let through of the text given so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Screened {
    /// The text decided and let through (redacted where a check redacted), plus the notice that ended the answer
    /// when one blocked it.
    pub text: String,
    /// The verdicts decided, offsets in bytes of the text the screen was given.
    pub verdicts: Vec<GuardrailVerdict>,
    /// The check that withheld the rest of the answer, when one did: nothing more is let through.
    pub withheld: Option<String>,
}

/// The judgement of one whole text ([`CallScreens::judge_text`]).
pub type JudgedText = Pin<Box<dyn Future<Output = Screened> + Send>>;

/// The judgement of a complete tool call ([`CallScreens::judge_tool_call`]): the call as the client is sent it
/// (`None`: not sent, a check blocked it or failed), and what was decided.
pub type JudgedToolCall = Pin<Box<dyn Future<Output = (Option<ToolCall>, Screened)> + Send>>;

/// The judgement of a tool result ([`CallScreens::judge_tool_result`]), as for a call.
pub type JudgedToolResult = Pin<Box<dyn Future<Output = (Option<ToolMessage>, Screened)> + Send>>;

/// A content policy's view of one answer's text, given in pieces as the answer streams: it may hold back the end
/// of a piece that a match could still be completing, and lets it through (or not) when more text comes or the
/// text ends.
pub trait AnswerScreen: Send + fmt::Debug {
    /// The next piece of the answer's text.
    fn push(&mut self, piece: &str) -> Screened;
    /// The text ended (a tool call, the finish, the stream's end): decide what was held back.
    fn finish(&mut self) -> Screened;
}

/// What a content policy lets a recorder inside it keep of one call's answer (see the [module docs](self)).
pub trait CallScreens: Send + Sync + fmt::Debug {
    /// A screen for the next text of the answer. It goes on from the texts before it in the same call (the
    /// rounds of a tool loop included), as the policy's own guard does, so a match split between two texts is
    /// decided the same way for the record as for the client.
    fn text(&self) -> Box<dyn AnswerScreen>;
    /// A screen for one reasoning block, judged on its own.
    fn reasoning(&self) -> Box<dyn AnswerScreen>;
    /// A complete tool call, its arguments redacted in place as the client is sent them. A block's
    /// [`Screened::withheld`] names the check and [`Screened::text`] is the notice that ends the answer.
    fn tool_call(&self, call: &mut ToolCall) -> Screened;
    /// A tool result, its content redacted in place as the client is sent it; a block as for
    /// [`CallScreens::tool_call`].
    fn tool_result(&self, result: &mut ToolMessage) -> Screened;
    /// Whether the policy judges each text of the answer whole when it ends (see the [module docs](self)): a
    /// recorder then keeps none of a text until it ended and [`CallScreens::judge_text`] judged it. `false`
    /// unless a policy says so.
    fn judges_text_whole(&self) -> bool {
        false
    }
    /// Judge one complete text of the answer, as the screens of [`CallScreens::text`] let it through, with the
    /// checks that judge whole texts: what the client is let see of it (redacted, or only the notice that ends
    /// the answer, with [`Screened::withheld`] naming the check), and the verdicts. Nothing is let through when
    /// a check fails: the answer ends with the check's error. Unless a policy says otherwise, the text as given.
    fn judge_text(&self, text: String) -> JudgedText {
        Box::pin(std::future::ready(Screened {
            text,
            ..Screened::default()
        }))
    }
    /// The judgement [`CallScreens::judge_text`] already made of `text`, while the policy still holds it: a later
    /// round's request carries the text again, and its recorder keeps it as the client saw it. `None` unless a
    /// policy says otherwise.
    fn judged_text(&self, _text: &str) -> Option<Screened> {
        None
    }
    /// A complete tool call judged with every check of the policy, the whole-text ones included, when it has
    /// such checks of tool calls; the recorder keeps what this lets through instead of what
    /// [`CallScreens::tool_call`] decides, and the policy's guard takes the same judgement for the same call.
    /// `None` (the default): [`CallScreens::tool_call`] decides alone.
    fn judge_tool_call(&self, _call: &ToolCall) -> Option<JudgedToolCall> {
        None
    }
    /// A tool result judged as [`CallScreens::judge_tool_call`] judges a call.
    fn judge_tool_result(&self, _result: &ToolMessage) -> Option<JudgedToolResult> {
        None
    }
}

/// What a content policy decided about a call, for the recorders it calls (see the [module docs](self)).
/// Cheap to clone: the clones share it.
#[derive(Clone)]
pub struct GuardedCall(Arc<GuardedInner>);

struct GuardedInner {
    request_verdicts: Vec<GuardrailVerdict>,
    request_verdicts_taken: AtomicBool,
    screens: Option<Arc<dyn CallScreens>>,
    /// Messages of the request as the policy checked it: those after them were added inside (a tool loop's
    /// calls and results).
    checked_messages: Option<usize>,
}

impl fmt::Debug for GuardedCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedCall")
            .field("request_verdicts", &self.0.request_verdicts)
            .field("screens", &self.0.screens)
            .field("checked_messages", &self.0.checked_messages)
            .finish()
    }
}

impl GuardedCall {
    /// The verdicts the request was given, and the screens of the answer (`None`: the policy has no check of the
    /// answer's text that a recorder can apply).
    pub fn new(
        request_verdicts: Vec<GuardrailVerdict>,
        screens: Option<Arc<dyn CallScreens>>,
    ) -> Self {
        GuardedCall(Arc::new(GuardedInner {
            request_verdicts,
            request_verdicts_taken: AtomicBool::new(false),
            screens,
            checked_messages: None,
        }))
    }

    /// The same, saying that the request the policy checked had `count` messages: a recorder passes those
    /// after them (added inside, by a tool loop) through the screens before it keeps them.
    pub fn checked_messages(self, count: usize) -> Self {
        let inner = &self.0;
        GuardedCall(Arc::new(GuardedInner {
            request_verdicts: inner.request_verdicts.clone(),
            request_verdicts_taken: AtomicBool::new(
                inner.request_verdicts_taken.load(Ordering::Acquire),
            ),
            screens: inner.screens.clone(),
            checked_messages: Some(count),
        }))
    }

    /// How many messages the request the policy checked had, when it said.
    pub fn checked_message_count(&self) -> Option<usize> {
        self.0.checked_messages
    }

    /// The request's verdicts, once: the first recorder to ask keeps them with its record (a tool loop's later
    /// rounds send the same checked request and get none, so a verdict is counted once per call).
    pub fn take_request_verdicts(&self) -> Vec<GuardrailVerdict> {
        if self.0.request_verdicts_taken.swap(true, Ordering::AcqRel) {
            Vec::new()
        } else {
            self.0.request_verdicts.clone()
        }
    }

    /// The screens of the answer, if the policy has checks a recorder can apply.
    pub fn screens(&self) -> Option<&Arc<dyn CallScreens>> {
        self.0.screens.as_ref()
    }
}
