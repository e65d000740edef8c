//! Running one call: panics, timeouts and the `execute_tool` span.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use serde_json::Value;
use tower_chat::{ToolCall, ToolMessage};
use tracing::Instrument;

use crate::policy::{ErrorDetail, ToolFailure, ToolFailureKind};
use crate::tool::{CompiledTool, ToolContext};

/// What one call produced for the model, and the failure behind it if it failed.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) message: ToolMessage,
    /// Set for failures that count (towards the consecutive-failure limit, and for the error policy); a denied
    /// approval or an exhausted call budget is an error result but not a failure of the tool.
    pub(crate) failure: Option<ToolFailure>,
}

impl Outcome {
    pub(crate) fn failure(call: &ToolCall, kind: ToolFailureKind, message: String) -> Self {
        Outcome {
            message: ToolMessage::error(&call.id, &call.name, format!("error: {message}")),
            failure: Some(ToolFailure {
                call: call.clone(),
                kind,
                message,
            }),
        }
    }

    pub(crate) fn refused(call: &ToolCall, content: String) -> Self {
        Outcome {
            message: ToolMessage::error(&call.id, &call.name, content),
            failure: None,
        }
    }
}

pub(crate) type Execution = BoxFuture<'static, (usize, Outcome)>;

/// An outcome known without running anything, in the same ordered sequence as the running calls.
pub(crate) fn known(index: usize, outcome: Outcome) -> Execution {
    Box::pin(futures_util::future::ready((index, outcome)))
}

/// Run one validated call inside an `execute_tool` span (a child of the span current now, i.e. of whoever polls
/// the stream). Arguments and results are deliberately not recorded on the span: they may be sensitive.
pub(crate) fn run(
    index: usize,
    tool: CompiledTool,
    call: ToolCall,
    arguments: Value,
    context: ToolContext,
    timeout: Option<Duration>,
    detail: ErrorDetail,
) -> Execution {
    let span = tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        gen_ai.operation.name = %"execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        error.type = tracing::field::Empty,
    );
    let recorder = span.clone();
    let token = context.cancellation().clone();
    let work = async move {
        // The body's synchronous part runs inside the guarded future too, so a panic there is caught as well.
        let body = AssertUnwindSafe(async { tool.call(arguments, context).await }).catch_unwind();
        let finished = match timeout {
            Some(limit) => tokio::time::timeout(limit, body).await.ok(),
            None => Some(body.await),
        };
        if finished.is_none() {
            // The body's future is gone; work it spawned learns through its token.
            token.cancel();
        }
        let outcome = match finished {
            Some(Ok(Ok(text))) => Outcome {
                message: ToolMessage::success(&call.id, &call.name, text),
                failure: None,
            },
            Some(Ok(Err(error))) if error.is_invalid_arguments() => Outcome::failure(
                &call,
                ToolFailureKind::InvalidArguments,
                format!("invalid arguments for tool `{}`: {error}", call.name),
            ),
            Some(Ok(Err(error))) => {
                let mut outcome =
                    Outcome::failure(&call, ToolFailureKind::Failed, error.to_string());
                if detail == ErrorDetail::Brief {
                    outcome.message.content = "error: the tool failed".into();
                }
                outcome
            }
            Some(Err(panic)) => {
                let mut outcome = Outcome::failure(
                    &call,
                    ToolFailureKind::Panicked,
                    format!("the tool panicked: {}", panic_message(&*panic)),
                );
                if detail == ErrorDetail::Brief {
                    outcome.message.content = "error: the tool failed".into();
                }
                outcome
            }
            None => Outcome::failure(
                &call,
                ToolFailureKind::TimedOut,
                format!(
                    "the tool did not finish within {:?}",
                    timeout.unwrap_or_default()
                ),
            ),
        };
        if let Some(failure) = &outcome.failure {
            recorder.record("error.type", failure.kind.as_str());
        }
        (index, outcome)
    };
    Box::pin(work.instrument(span))
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&'static str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "(no message)"
    }
}
