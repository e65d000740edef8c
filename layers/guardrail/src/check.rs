//! [`Check`]: one rule of a policy — what to look for, where, and what to do when it is found.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tower_chat::{ChatError, GuardrailAction, GuardrailStage, TextSpan};

use crate::builtin::{self, LengthFinder};
use crate::pattern::{deny_list_pattern, Kind, RegexFinder};
use crate::scan::Finder;

/// A boxed future of a [`TextCheck`].
pub type CheckFuture = Pin<Box<dyn Future<Output = Result<Vec<Finding>, ChatError>> + Send>>;

/// What a [`TextCheck`] found in a text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finding {
    /// The span it objects to, in bytes of the text it was given; `None` for the whole text.
    pub span: Option<TextSpan>,
    /// What it found, by kind (a moderation category, a schema violation's path): recorded in the verdict,
    /// and the label of a redaction. Never the text itself.
    pub detail: Option<String>,
}

impl Finding {
    /// A finding about the whole text.
    pub fn whole(detail: impl Into<String>) -> Self {
        Finding {
            span: None,
            detail: Some(detail.into()),
        }
    }
}

/// A check that judges a whole text, asynchronously: an external moderation service, a schema, a check of your
/// own. On a stream the layer holds the answer's text back until the answer is complete and the check has
/// judged it (a check of this kind sees all of the text or nothing); it sees the text as it would go on, after
/// the pattern checks' redactions, so a secret redacted by a pattern never reaches an external service.
pub trait TextCheck: Send + Sync + 'static {
    /// Judge `text`: no findings lets it through.
    fn check(&self, text: String, stage: GuardrailStage) -> CheckFuture;
}

/// A [`TextCheck`] from an `async` closure (see [`Check::from_fn`]).
#[derive(Clone)]
pub struct CheckFn<F>(F);

impl<F> fmt::Debug for CheckFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CheckFn")
            .field(&std::any::type_name::<F>())
            .finish()
    }
}

impl<F, Fut> TextCheck for CheckFn<F>
where
    F: Fn(String, GuardrailStage) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<Finding>, ChatError>> + Send + 'static,
{
    fn check(&self, text: String, stage: GuardrailStage) -> CheckFuture {
        Box::pin((self.0)(text, stage))
    }
}

/// What a check looks with.
#[derive(Clone)]
pub(crate) enum Detector {
    /// Bounded patterns, run on streams piece by piece.
    Scan(Vec<Arc<dyn Finder>>),
    /// A judge of whole texts.
    Whole(Arc<dyn TextCheck>),
}

/// One rule of a policy: what to look for, on which [`GuardrailStage`]s, and the [`GuardrailAction`] to take.
///
/// Built-in checks and their defaults:
///
/// | constructor | finds | default action | default stages |
/// |---|---|---|---|
/// | [`Check::secrets`] | API keys (OpenAI, Anthropic, AWS, GitHub, Slack, Google), PEM private-key headers | block | all |
/// | [`Check::personal_data`] | emails, phone numbers, payment cards (Luhn), IBANs (mod-97) | redact | all |
/// | [`Check::pattern`] | a regular expression of yours | block | all |
/// | [`Check::deny_list`] | words and phrases, case-insensitive, whole words | block | all |
/// | [`Check::output_length`] | an answer longer than a number of bytes | block | output |
/// | [`Check::moderation`](crate::Check::moderation) | an OpenAI-format moderation service's flag | block | request, output |
/// | [`Check::from_fn`] / [`Check::custom`] | what your check says | block | request, output |
/// | `Check::json_schema` (feature `schema`) | a structured answer that does not match a JSON Schema | block | output |
///
/// The action and stages are changed with [`block`](Check::block), [`redact`](Check::redact),
/// [`flag`](Check::flag) and [`on`](Check::on); the name that verdicts and errors carry with
/// [`named`](Check::named).
#[derive(Clone)]
pub struct Check {
    pub(crate) name: Arc<str>,
    pub(crate) detector: Detector,
    pub(crate) action: GuardrailAction,
    pub(crate) stages: Vec<GuardrailStage>,
    /// What is found cannot be replaced, only cut off (a length): redacting blocks.
    cuts: bool,
}

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check")
            .field("name", &self.name)
            .field(
                "detector",
                &match &self.detector {
                    Detector::Scan(finders) => Cow::Owned(format!("{finders:?}")),
                    Detector::Whole(_) => Cow::Borrowed("whole text"),
                },
            )
            .field("action", &self.action)
            .field("stages", &self.stages)
            .finish()
    }
}

const ALL_STAGES: [GuardrailStage; 4] = [
    GuardrailStage::Request,
    GuardrailStage::ToolCall,
    GuardrailStage::ToolResult,
    GuardrailStage::Output,
];

impl Check {
    fn scan(name: &str, finders: Vec<Arc<dyn Finder>>, action: GuardrailAction) -> Self {
        Check {
            name: name.into(),
            detector: Detector::Scan(finders),
            action,
            stages: ALL_STAGES.to_vec(),
            cuts: false,
        }
    }

    /// API keys and private keys (`secrets`): blocked everywhere by default.
    pub fn secrets() -> Self {
        Check::scan(
            "secrets",
            builtin::secrets("secrets"),
            GuardrailAction::Block,
        )
    }

    /// Emails, phone numbers, payment card numbers and IBANs (`personal_data`): redacted everywhere by default
    /// (`[REDACTED:email]`, `[REDACTED:card]`, …).
    pub fn personal_data() -> Self {
        Check::scan(
            "personal_data",
            builtin::personal_data("personal_data"),
            GuardrailAction::Redact,
        )
    }

    /// A regular expression (the `regex` crate's syntax, linear time). Refused when it does not compile, matches
    /// empty text, or has no upper bound on its matches' length (write `{1,64}` rather than `+`): a stream holds
    /// back at most that many bytes.
    pub fn pattern(name: &str, pattern: &str) -> Result<Self, ChatError> {
        let finder = RegexFinder::new(name, pattern, Kind::Fixed(""))?;
        Ok(Check::scan(
            name,
            vec![Arc::new(finder)],
            GuardrailAction::Block,
        ))
    }

    /// Words and phrases, matched case-insensitively as whole words.
    pub fn deny_list<I, W>(name: &str, words: I) -> Result<Self, ChatError>
    where
        I: IntoIterator<Item = W>,
        W: AsRef<str>,
    {
        let pattern = deny_list_pattern(words);
        let finder = RegexFinder::new(name, &pattern, Kind::Fixed(""))?;
        Ok(Check::scan(
            name,
            vec![Arc::new(finder)],
            GuardrailAction::Block,
        ))
    }

    /// An answer longer than `max_bytes` bytes of text (`output_length`, on the output only; counted per text
    /// segment, so each model round behind a tool loop has the limit to itself). Blocking cuts the
    /// answer at the limit (at a character boundary) and ends it with a `content_filter` finish; redacting does
    /// the same (what lies past the limit cannot be shown); flagging lets it through.
    pub fn output_length(max_bytes: usize) -> Self {
        Check {
            stages: vec![GuardrailStage::Output],
            cuts: true,
            ..Check::scan(
                "output_length",
                vec![Arc::new(LengthFinder { max_bytes })],
                GuardrailAction::Block,
            )
        }
    }

    /// Any [`TextCheck`] (`name` in verdicts), on the request and the output by default.
    pub fn custom(name: &str, check: impl TextCheck) -> Self {
        Check {
            name: name.into(),
            detector: Detector::Whole(Arc::new(check)),
            action: GuardrailAction::Block,
            stages: vec![GuardrailStage::Request, GuardrailStage::Output],
            cuts: false,
        }
    }

    /// A check of your own from an `async` closure that gets each text (and where it comes from) and returns its
    /// findings.
    ///
    /// ```
    /// use tower_chat::{ChatError, GuardrailStage};
    /// use tower_chat_guardrail::{Check, Finding};
    ///
    /// let no_sql = Check::from_fn("no_sql", |text: String, _stage: GuardrailStage| async move {
    ///     Ok::<_, ChatError>(if text.contains("DROP TABLE") { vec![Finding::whole("sql")] } else { vec![] })
    /// });
    /// # let _ = no_sql;
    /// ```
    pub fn from_fn<F, Fut>(name: &str, check: F) -> Self
    where
        F: Fn(String, GuardrailStage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<Finding>, ChatError>> + Send + 'static,
    {
        Check::custom(name, CheckFn(check))
    }

    /// Refuse the request, or end the answer with a `content_filter` finish.
    pub fn block(mut self) -> Self {
        self.action = GuardrailAction::Block;
        self
    }

    /// Replace what was found by `[REDACTED:<kind>]` and let the rest through.
    pub fn redact(mut self) -> Self {
        self.action = if self.cuts {
            GuardrailAction::Block
        } else {
            GuardrailAction::Redact
        };
        self
    }

    /// Let it through and record the verdict.
    pub fn flag(mut self) -> Self {
        self.action = GuardrailAction::Flag;
        self
    }

    /// Look only at these stages.
    pub fn on(mut self, stages: &[GuardrailStage]) -> Self {
        self.stages = stages.to_vec();
        self
    }

    /// The name verdicts and errors carry.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// The check's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the check does when it finds something.
    pub fn action(&self) -> GuardrailAction {
        self.action
    }
}
