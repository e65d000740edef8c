//! The tool loop: a pinned state machine that is the caller's one continuous event stream.
//!
//! ```text
//!            ┌──────────── next round ────────────┐
//!            ▼                                    │
//! Resume ─► Ready ─► Calling ─► Streaming ─► Tools ─► Done
//!   │      (poll_ready) (model     (forward       (run calls,
//!   │                   future)     deltas)        emit results)
//!   └─────────────────────────────────────────────┘
//! ```
//!
//! Like tower's `retry::ResponseFuture`, the loop owns a clone of the inner service and polls its `poll_ready`
//! before every re-call.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use futures_util::stream::{self, Buffered, Iter, StreamExt};
use pin_project_lite::pin_project;
use tokio_util::sync::{DropGuard, WaitForCancellationFutureOwned};
use tower_chat::{
    ApprovalDecisions, ApprovalRequest, AssistantMessage, CancellationToken, ChatError, ChatEvent,
    ChatRequest, ChatStream, ErrorKind, FinishReason, Message, ReasoningPart, ToolCall, ToolChoice,
    ToolMessage, Usage,
};
use tower_service::Service;

use crate::config::Config;
use crate::execute::{self, Execution, Outcome};
use crate::placement::{InsideToolLoop, ToolLoopPresence};
use crate::policy::{stricter, ApprovalPolicy, ApprovalVerdict, ToolFailureKind};
use crate::tool::{CompiledTool, ToolContext};
use crate::toolset::Resolved;

/// Calls of the conversation's last assistant message that have no tool message yet.
#[derive(Debug)]
pub(crate) struct Pending {
    /// Index of the assistant message in the history.
    at: usize,
    calls: Vec<ToolCall>,
    /// The answers already in the history, by call index.
    answered: Vec<Option<ToolMessage>>,
    /// Tool messages after the assistant message that answer none of its calls; kept, after the answers.
    strays: Vec<ToolMessage>,
}

impl Pending {
    /// Find pending calls: the last assistant message must have calls, be followed only by tool messages, and
    /// some of its calls must lack one.
    pub(crate) fn find(messages: &[Message]) -> Option<Pending> {
        let at = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant(_)))?;
        let Message::Assistant(assistant) = &messages[at] else {
            return None;
        };
        let mut by_id: HashMap<&str, &ToolMessage> = HashMap::new();
        let mut tool_messages = Vec::new();
        for message in &messages[at + 1..] {
            match message {
                Message::Tool(tool) => {
                    by_id.insert(&tool.call_id, tool);
                    tool_messages.push(tool);
                }
                _ => return None,
            }
        }
        let answered: Vec<Option<ToolMessage>> = assistant
            .tool_calls
            .iter()
            .map(|c| by_id.get(c.id.as_str()).map(|m| (*m).clone()))
            .collect();
        if answered.iter().all(Option::is_some) {
            return None;
        }
        let strays = tool_messages
            .into_iter()
            .filter(|m| !assistant.tool_calls.iter().any(|c| c.id == m.call_id))
            .cloned()
            .collect();
        Some(Pending {
            at,
            calls: assistant.tool_calls.clone(),
            answered,
            strays,
        })
    }
}

type Executions = Buffered<Iter<std::vec::IntoIter<Execution>>>;

/// One round of tool calls in progress.
pub(crate) struct Round {
    /// Index of the assistant message whose calls these are.
    at: usize,
    results: Vec<Option<ToolMessage>>,
    strays: Vec<ToolMessage>,
    executions: Executions,
    awaiting: bool,
    hand_back: bool,
    all_direct: bool,
    failed: Option<String>,
}

/// Everything the loop keeps besides its current state.
pub(crate) struct LoopCore<S> {
    inner: S,
    config: Arc<Config>,
    tools: Arc<Resolved>,
    /// The conversation as the model will see it next, with the options it is called with.
    request: ChatRequest,
    decisions: Option<ApprovalDecisions>,
    resume: Option<Pending>,
    request_policy: Option<ApprovalPolicy>,
    tool_extensions: Option<Arc<http::Extensions>>,
    round: usize,
    total_calls: usize,
    consecutive_failures: usize,
    usage: Usage,
    saw_usage: bool,
    withheld: bool,
    content: String,
    /// Reasoning text streamed since the last complete reasoning part.
    reasoning_text: String,
    /// The round's complete reasoning parts, sent back on the next round by the leaf that produced them.
    reasoning: Vec<ReasoningPart>,
    calls: Vec<ToolCall>,
    queue: VecDeque<Result<ChatEvent, ChatError>>,
    cancelled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    tool_token: CancellationToken,
    _cancel_tools_on_drop: DropGuard,
}

impl<S> LoopCore<S> {
    pub(crate) fn new(
        inner: S,
        config: Arc<Config>,
        tools: Arc<Resolved>,
        mut request: ChatRequest,
    ) -> Self {
        // Decisions are for the calls pending now; later rounds' calls (new ids) must not see them.
        let decisions = request.extensions.remove::<ApprovalDecisions>();
        let resume = decisions
            .as_ref()
            .and_then(|_| Pending::find(&request.messages));
        let request_policy = request.extensions.get::<ApprovalPolicy>().cloned();
        if let Some(presence) = request.extensions.get::<ToolLoopPresence>() {
            presence.mark();
        }
        // Every round's request says it comes from inside a loop (see `InsideToolLoop`).
        request.extensions.insert(InsideToolLoop);
        // Shared: each round's request points at the same specs.
        request.options.tools = tools.specs.clone();
        let tool_token = match request.cancellation() {
            Some(token) => token.child_token(),
            None => CancellationToken::new(),
        };
        let cancelled = request
            .cancellation()
            .map(|token| Box::pin(token.clone().cancelled_owned()));
        LoopCore {
            inner,
            config,
            tools,
            request,
            decisions,
            resume,
            request_policy,
            tool_extensions: None,
            round: 0,
            total_calls: 0,
            consecutive_failures: 0,
            usage: Usage::default(),
            saw_usage: false,
            withheld: false,
            content: String::new(),
            reasoning_text: String::new(),
            reasoning: Vec::new(),
            calls: Vec::new(),
            queue: VecDeque::new(),
            cancelled,
            _cancel_tools_on_drop: tool_token.clone().drop_guard(),
            tool_token,
        }
    }

    /// Whether the request resumes pending calls (no model call comes first).
    pub(crate) fn resumes(&self) -> bool {
        self.resume.is_some()
    }

    pub(crate) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    pub(crate) fn next_request(&self) -> ChatRequest {
        let mut request = self.request.clone();
        if self.withheld {
            request.options.tool_choice = Some(ToolChoice::None);
        }
        request
    }

    fn finish(&mut self, reason: FinishReason) {
        if self.saw_usage {
            self.queue
                .push_back(Ok(ChatEvent::Usage { usage: self.usage }));
        }
        self.queue.push_back(Ok(ChatEvent::Finish { reason }));
    }

    /// Keep what the next round's assistant message needs from a passed-on event.
    fn observe(&mut self, event: &ChatEvent) {
        match event {
            ChatEvent::TextDelta { text } => self.content.push_str(text),
            ChatEvent::ReasoningDelta { text } => self.reasoning_text.push_str(text),
            ChatEvent::ReasoningEnd { continuation } => self.reasoning.push(ReasoningPart {
                text: std::mem::take(&mut self.reasoning_text),
                continuation: Some(continuation.clone()),
            }),
            ChatEvent::ToolCallEnd { call, .. } => self.calls.push(call.clone()),
            _ => {}
        }
    }

    fn model_finished<F>(&mut self, reason: FinishReason) -> State<F> {
        let calls = std::mem::take(&mut self.calls);
        let content = std::mem::take(&mut self.content);
        let mut reasoning = std::mem::take(&mut self.reasoning);
        if !self.reasoning_text.is_empty() {
            reasoning.push(ReasoningPart::text(std::mem::take(
                &mut self.reasoning_text,
            )));
        }
        if calls.is_empty() {
            self.finish(reason);
            return State::Done;
        }
        if self.withheld {
            // The model was told not to call tools and did anyway; its calls are not run.
            self.finish(FinishReason::MaxRounds);
            return State::Done;
        }
        // Planned before the assistant message takes the calls (planning reads the calls, never the history), so
        // the message gets them without a copy of every call's arguments.
        let at = self.request.messages.len();
        let answered = vec![None; calls.len()];
        let state = self.plan(at, &calls, answered, Vec::new(), None);
        self.request
            .messages
            .push(Message::Assistant(AssistantMessage {
                content,
                reasoning,
                tool_calls: calls,
                provider_parts: Vec::new(),
            }));
        state
    }

    fn resume<F>(&mut self) -> State<F> {
        let Some(pending) = self.resume.take() else {
            return State::Ready;
        };
        let decisions = self.decisions.take();
        self.plan(
            pending.at,
            &pending.calls,
            pending.answered,
            pending.strays,
            decisions.as_ref(),
        )
    }

    fn verdict(&self, call: &ToolCall, tool: &CompiledTool) -> ApprovalVerdict {
        let mut verdict = ApprovalVerdict::Default;
        for policy in [&self.config.approval_policy, &self.request_policy]
            .into_iter()
            .flatten()
        {
            verdict = stricter(
                verdict,
                policy.verdict(call, tool, &self.request.extensions),
            );
        }
        verdict
    }

    fn context(&mut self, call: &ToolCall) -> ToolContext {
        let extensions = self
            .tool_extensions
            .get_or_insert_with(|| Arc::new((*self.request.extensions).clone()))
            .clone();
        ToolContext::new(
            &call.id,
            &call.name,
            self.round,
            extensions,
            // Per call, so that a timed-out call's token can be cancelled alone.
            self.tool_token.child_token(),
        )
    }

    /// Decide what happens to each unanswered call and start the ones that run.
    fn plan<F>(
        &mut self,
        at: usize,
        calls: &[ToolCall],
        results: Vec<Option<ToolMessage>>,
        strays: Vec<ToolMessage>,
        decisions: Option<&ApprovalDecisions>,
    ) -> State<F> {
        let mut executions: Vec<Execution> = Vec::with_capacity(calls.len());
        let mut awaiting = false;
        let mut hand_back = false;
        let mut all_direct = true;
        for (index, call) in calls.iter().enumerate() {
            if results[index].is_some() {
                continue;
            }
            let Some(tool) = self.tools.executable.get(&call.name).cloned() else {
                all_direct = false;
                if self.tools.client.contains(&call.name)
                    || self.config.unknown_tool == crate::UnknownToolPolicy::HandBack
                {
                    hand_back = true;
                } else {
                    let outcome = Outcome::failure(
                        call,
                        ToolFailureKind::UnknownTool,
                        self.unknown_tool_message(&call.name),
                    );
                    executions.push(execute::known(index, outcome));
                }
                continue;
            };
            all_direct &= tool.return_direct();
            let arguments = match tool.validate(&call.arguments) {
                Ok(arguments) => arguments,
                Err(message) => {
                    let outcome =
                        Outcome::failure(call, ToolFailureKind::InvalidArguments, message);
                    executions.push(execute::known(index, outcome));
                    continue;
                }
            };
            let (gated, reason) = match self.verdict(call, &tool) {
                ApprovalVerdict::Deny { reason } => {
                    let outcome = Outcome::refused(call, format!("not approved: {reason}"));
                    executions.push(execute::known(index, outcome));
                    continue;
                }
                ApprovalVerdict::Require { reason } => (true, reason),
                ApprovalVerdict::Default => (tool.requires_approval(), None),
            };
            match decisions.and_then(|d| d.get(&call.id)) {
                Some(decision) if !decision.approved => {
                    let reason = decision
                        .reason
                        .as_deref()
                        .unwrap_or("denied by the approver");
                    let outcome = Outcome::refused(call, format!("not approved: {reason}"));
                    executions.push(execute::known(index, outcome));
                    continue;
                }
                None if gated => {
                    awaiting = true;
                    self.queue.push_back(Ok(ChatEvent::ApprovalRequest {
                        request: Box::new(ApprovalRequest {
                            id: call.id.clone(),
                            call: call.clone(),
                            reason,
                        }),
                    }));
                    continue;
                }
                _ => {}
            }
            if let Some(limit) = self.config.max_tool_calls {
                if self.total_calls >= limit {
                    let outcome = Outcome::refused(
                        call,
                        format!(
                            "error: not run: the limit of {limit} tool calls per request was reached"
                        ),
                    );
                    executions.push(execute::known(index, outcome));
                    continue;
                }
            }
            self.total_calls += 1;
            let context = self.context(call);
            let timeout = tool.timeout().or(self.config.tool_timeout);
            executions.push(execute::run(
                index,
                tool,
                call.clone(),
                arguments,
                context,
                timeout,
                self.config.error_detail,
            ));
        }
        let limit = self
            .config
            .max_concurrency
            .unwrap_or(executions.len())
            .max(1);
        State::Tools {
            round: Box::new(Round {
                at,
                results,
                strays,
                executions: stream::iter(executions).buffered(limit),
                awaiting,
                hand_back,
                all_direct,
                failed: None,
            }),
        }
    }

    fn unknown_tool_message(&self, name: &str) -> String {
        let mut available: Vec<&str> = self.tools.executable.iter().map(|t| t.name()).collect();
        available.extend(self.tools.client.iter().map(String::as_str));
        if available.is_empty() {
            format!("unknown tool `{name}`; no tools are available")
        } else {
            format!(
                "unknown tool `{name}`; available tools: {}",
                available.join(", ")
            )
        }
    }

    /// Record one finished call; an error means the error policy ends the stream.
    fn outcome(
        &mut self,
        round: &mut Round,
        index: usize,
        outcome: Outcome,
    ) -> Result<(), ChatError> {
        if let Some(failure) = &outcome.failure {
            if let Some(policy) = &self.config.error_policy {
                if let Some(error) = policy.decide(failure) {
                    return Err(error);
                }
            }
            round.failed = Some(failure.message.clone());
        }
        self.queue.push_back(Ok(ChatEvent::ToolResult {
            result: outcome.message.clone(),
        }));
        round.results[index] = Some(outcome.message);
        Ok(())
    }

    fn round_finished<F>(&mut self, round: &mut Round) -> State<F> {
        let results = std::mem::take(&mut round.results);
        let direct = round.all_direct
            && !round.awaiting
            && !round.hand_back
            && results
                .iter()
                .all(|r| r.as_ref().is_some_and(|m| !m.is_error));
        // Answers go right after their assistant message, in the model's call order (a resumed round may have
        // had some of them already).
        self.request.messages.truncate(round.at + 1);
        self.request
            .messages
            .extend(results.into_iter().flatten().map(Message::Tool));
        self.request.messages.extend(
            std::mem::take(&mut round.strays)
                .into_iter()
                .map(Message::Tool),
        );
        self.round += 1;
        match &round.failed {
            Some(_) => self.consecutive_failures += 1,
            None => self.consecutive_failures = 0,
        }
        if round.awaiting {
            self.finish(FinishReason::AwaitingApproval);
            return State::Done;
        }
        if round.hand_back {
            self.finish(FinishReason::ToolCalls);
            return State::Done;
        }
        if let Some(last) = round.failed.as_ref() {
            if self.consecutive_failures >= self.config.max_consecutive_failures {
                self.queue.push_back(Err(ChatError::new(
                    ErrorKind::Tool,
                    format!(
                        "{} tool rounds in a row had failing calls; the last failure: {last}",
                        self.consecutive_failures
                    ),
                )));
                return State::Done;
            }
        }
        if direct {
            self.finish(FinishReason::Stop);
            return State::Done;
        }
        let calls_spent = self
            .config
            .max_tool_calls
            .is_some_and(|limit| self.total_calls >= limit);
        if self.round >= self.config.max_rounds || calls_spent {
            if self.config.final_round_without_tools && !self.withheld {
                self.withheld = true;
                return State::Ready;
            }
            self.finish(FinishReason::MaxRounds);
            return State::Done;
        }
        State::Ready
    }
}

pin_project! {
    /// Where the loop is.
    #[project = StateProj]
    pub(crate) enum State<F> {
        // Pending calls from the request's history run before any model call.
        Resume,
        // The next model call waits for the inner service's readiness.
        Ready,
        Calling { #[pin] future: F },
        Streaming { stream: ChatStream },
        Tools { round: Box<Round> },
        Done,
    }
}

pin_project! {
    /// The caller's event stream.
    pub(crate) struct ToolLoop<S>
    where
        S: Service<ChatRequest>,
    {
        core: LoopCore<S>,
        #[pin]
        state: State<S::Future>,
    }
}

impl<S> ToolLoop<S>
where
    S: Service<ChatRequest>,
{
    pub(crate) fn new(core: LoopCore<S>, state: State<S::Future>) -> Self {
        ToolLoop { core, state }
    }
}

impl<S> Stream for ToolLoop<S>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        let core = this.core;
        loop {
            if let Some(item) = core.queue.pop_front() {
                return Poll::Ready(Some(item));
            }
            if let StateProj::Done = this.state.as_mut().project() {
                return Poll::Ready(None);
            }
            if let Some(cancelled) = core.cancelled.as_mut() {
                if cancelled.as_mut().poll(cx).is_ready() {
                    // Dropping the state drops running tool bodies and the model stream; the token reaches work
                    // the bodies spawned.
                    core.tool_token.cancel();
                    this.state.set(State::Done);
                    return Poll::Ready(Some(Err(ChatError::cancelled())));
                }
            }
            match this.state.as_mut().project() {
                StateProj::Resume => {
                    let next = core.resume();
                    this.state.set(next);
                }
                StateProj::Ready => {
                    if let Err(error) = ready!(core.inner.poll_ready(cx)) {
                        this.state.set(State::Done);
                        return Poll::Ready(Some(Err(error)));
                    }
                    let future = core.inner.call(core.next_request());
                    this.state.set(State::Calling { future });
                }
                StateProj::Calling { future } => match ready!(future.poll(cx)) {
                    Ok(stream) => this.state.set(State::Streaming { stream }),
                    Err(error) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Some(Err(error)));
                    }
                },
                StateProj::Streaming { stream } => match ready!(stream.as_mut().poll_next(cx)) {
                    Some(Ok(ChatEvent::Usage { usage })) => {
                        core.usage.add(&usage);
                        core.saw_usage = true;
                    }
                    Some(Ok(ChatEvent::Finish { reason })) => {
                        let next = core.model_finished(reason);
                        this.state.set(next);
                    }
                    Some(Ok(event)) => {
                        core.observe(&event);
                        return Poll::Ready(Some(Ok(event)));
                    }
                    Some(Err(error)) => {
                        this.state.set(State::Done);
                        return Poll::Ready(Some(Err(error)));
                    }
                    None => {
                        this.state.set(State::Done);
                        return Poll::Ready(Some(Err(ChatError::new(
                            ErrorKind::Protocol,
                            "the model's stream ended without a finish event",
                        ))));
                    }
                },
                StateProj::Tools { round } => match ready!(round.executions.poll_next_unpin(cx)) {
                    Some((index, outcome)) => {
                        if let Err(error) = core.outcome(round, index, outcome) {
                            this.state.set(State::Done);
                            return Poll::Ready(Some(Err(error)));
                        }
                    }
                    None => {
                        let next = core.round_finished(round);
                        this.state.set(next);
                    }
                },
                StateProj::Done => return Poll::Ready(None),
            }
        }
    }
}
