//! Running a request through a chat service and reading what it yields.

use futures_util::StreamExt;
use tower::{Service, ServiceExt};
use tower_chat::{
    ApprovalRequest, ChatError, ChatEvent, ChatRequest, ChatResponse, ChatStream, ChatStreamExt,
    FinishReason, Message, ResponseBuilder, ToolMessage, Usage,
};

use crate::within;

/// Everything the stream yields, and the error that ended it, if one did (failing the test if the stream goes
/// on after an error).
pub async fn drain(mut stream: ChatStream) -> (Vec<ChatEvent>, Option<ChatError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(
                    stream.next().await.is_none(),
                    "the stream went on after an error"
                );
                return (events, Some(error));
            }
        }
    }
    (events, None)
}

/// One request through `service`, which must accept it: its events and the error that ended the stream.
pub async fn run<S>(service: S, request: ChatRequest) -> (Vec<ChatEvent>, Option<ChatError>)
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let stream = service
        .oneshot(request)
        .await
        .expect("the call was refused");
    drain(stream).await
}

/// One request through `service`: its events, or the error that refused the call or ended the stream.
pub async fn try_run<S>(service: S, request: ChatRequest) -> Result<Vec<ChatEvent>, ChatError>
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    let stream = service.oneshot(request).await?;
    match drain(stream).await {
        (events, None) => Ok(events),
        (_, Some(error)) => Err(error),
    }
}

/// One request through `service`, collected into a response that must succeed within [`BOUND`](crate::BOUND).
pub async fn respond<S>(service: S, request: ChatRequest) -> ChatResponse
where
    S: Service<ChatRequest, Response = ChatStream, Error = ChatError>,
{
    within("the response", async {
        service
            .oneshot(request)
            .await
            .expect("call")
            .collect_response()
            .await
            .expect("response")
    })
    .await
}

/// The messages a response of these events adds to the history.
pub fn messages(events: &[ChatEvent]) -> Vec<Message> {
    let mut builder = ResponseBuilder::new();
    events.iter().for_each(|e| builder.push(e));
    builder.finish().messages
}

/// Every finish reason, in order.
pub fn finish_reasons(events: &[ChatEvent]) -> Vec<FinishReason> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Finish { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// The last finish reason.
pub fn finish(events: &[ChatEvent]) -> Option<FinishReason> {
    finish_reasons(events).pop()
}

/// The tool results.
pub fn tool_results(events: &[ChatEvent]) -> Vec<ToolMessage> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolResult { result } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

/// The usage events' figures.
pub fn usages(events: &[ChatEvent]) -> Vec<Usage> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::Usage { usage } => Some(*usage),
            _ => None,
        })
        .collect()
}

/// The text deltas, joined.
pub fn text(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The approval requests.
pub fn approvals(events: &[ChatEvent]) -> Vec<ApprovalRequest> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ApprovalRequest { request } => Some(ApprovalRequest::clone(request)),
            _ => None,
        })
        .collect()
}

/// The tool messages among `messages`.
pub fn tool_messages(messages: &[Message]) -> Vec<ToolMessage> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The tool messages since the last assistant message (the results a model reads next), in order.
pub fn latest_tool_messages(messages: &[Message]) -> Vec<ToolMessage> {
    let since = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant(_)))
        .map_or(0, |i| i + 1);
    tool_messages(&messages[since..])
}
