//! Scripted answers in the OpenAI Responses wire format: named `response.*` events, or the one `response` object
//! a request that does not ask to stream gets.

use serde_json::{json, Value};

use super::Reply;

/// The usage the scripted answers report.
fn usage(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output})
}

/// Numbers the events (`sequence_number`) as the API does.
fn numbered(events: Vec<Value>) -> Vec<Value> {
    events
        .into_iter()
        .enumerate()
        .map(|(n, mut event)| {
            event["sequence_number"] = n.into();
            event
        })
        .collect()
}

fn created() -> Value {
    json!({"type": "response.created", "response": {"id": "resp_scripted", "object": "response",
        "model": "scripted-model", "status": "in_progress", "output": [], "usage": null}})
}

fn completed(output: Vec<Value>, usage: Value) -> Value {
    json!({"type": "response.completed", "response": {"id": "resp_scripted", "object": "response",
        "model": "scripted-model", "status": "completed", "output": output, "usage": usage}})
}

/// A scripted reasoning item: its id, its encrypted content and one summary text (empty: no summary).
pub type ScriptedReasoning<'a> = (&'a str, &'a str, &'a str);

impl Reply {
    /// A Responses streaming reply: each JSON value becomes one event named by its `type`; a request that does
    /// not ask to stream gets the same answer as one `response` object.
    pub fn responses_stream(events: &[Value]) -> Self {
        let sse: Vec<String> = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect();
        Reply {
            whole: Some(responses_response(events)),
            ..Reply::sse_chunks(sse)
        }
    }

    /// A Responses streaming answer of plain text, a word per delta, with usage.
    pub fn responses_text(text: &str) -> Self {
        let mut events = vec![
            created(),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message",
                "id": "msg_scripted", "role": "assistant", "status": "in_progress", "content": []}}),
            json!({"type": "response.content_part.added", "item_id": "msg_scripted", "output_index": 0,
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ];
        for word in text.split_inclusive(' ') {
            events.push(
                json!({"type": "response.output_text.delta", "item_id": "msg_scripted",
                "output_index": 0, "content_index": 0, "delta": word, "logprobs": []}),
            );
        }
        let message = json!({"type": "message", "id": "msg_scripted", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        events.push(
            json!({"type": "response.output_text.done", "item_id": "msg_scripted",
            "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
        );
        events.push(
            json!({"type": "response.output_item.done", "output_index": 0, "item": message.clone()}),
        );
        events.push(completed(vec![message], usage(12, 0, 5, 0)));
        Reply::responses_stream(&numbered(events))
    }

    /// A Responses streaming answer that calls tools: `(call id, tool name, arguments JSON text)`.
    pub fn responses_tool_calls(calls: &[(&str, &str, &str)]) -> Self {
        Reply::responses_reasoning_and_calls(&[], calls)
    }

    /// A Responses streaming answer of reasoning items (streaming their summaries) followed by tool calls, as a
    /// reasoning model answers; usage reports 8 cached prompt tokens and 16 reasoning tokens.
    pub fn responses_reasoning_and_calls(
        reasoning: &[ScriptedReasoning<'_>],
        calls: &[(&str, &str, &str)],
    ) -> Self {
        let mut events = vec![created()];
        let mut output = Vec::new();
        for (id, encrypted, summary) in reasoning {
            let index = output.len();
            events.push(
                json!({"type": "response.output_item.added", "output_index": index,
                "item": {"type": "reasoning", "id": id, "summary": []}}),
            );
            let summaries = if summary.is_empty() {
                json!([])
            } else {
                events.push(json!({"type": "response.reasoning_summary_part.added", "item_id": id,
                    "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}));
                for piece in summary.split_inclusive(' ') {
                    events.push(
                        json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
                        "output_index": index, "summary_index": 0, "delta": piece}),
                    );
                }
                json!([{"type": "summary_text", "text": summary}])
            };
            let item = json!({"type": "reasoning", "id": id, "summary": summaries,
                "encrypted_content": encrypted});
            events.push(
                json!({"type": "response.output_item.done", "output_index": index, "item": item.clone()}),
            );
            output.push(item);
        }
        for (call_id, name, arguments) in calls {
            let index = output.len();
            let id = format!("fc_{call_id}");
            events.push(
                json!({"type": "response.output_item.added", "output_index": index,
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name,
                    "arguments": "", "status": "in_progress"}}),
            );
            // Split the arguments in two fragments, as the API does.
            let mid = arguments
                .char_indices()
                .nth(arguments.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            for piece in [&arguments[..mid], &arguments[mid..]] {
                events.push(
                    json!({"type": "response.function_call_arguments.delta", "item_id": id,
                    "output_index": index, "delta": piece}),
                );
            }
            events.push(
                json!({"type": "response.function_call_arguments.done", "item_id": id,
                "output_index": index, "arguments": arguments}),
            );
            let item = json!({"type": "function_call", "id": id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": "completed"});
            events.push(
                json!({"type": "response.output_item.done", "output_index": index, "item": item.clone()}),
            );
            output.push(item);
        }
        let reasoning_tokens = if reasoning.is_empty() { 0 } else { 16 };
        events.push(completed(output, usage(40, 8, 30, reasoning_tokens)));
        Reply::responses_stream(&numbered(events))
    }
}

/// Responses stream events → one `response`: the response of the last `response.completed`,
/// `response.incomplete` or `response.failed` event, its `output` filled from the `response.output_item.done`
/// events when the script left it empty.
pub(super) fn responses_response(events: &[Value]) -> Value {
    let terminal = [
        "response.completed",
        "response.incomplete",
        "response.failed",
    ];
    let mut response = events
        .iter()
        .rev()
        .find(|e| terminal.iter().any(|t| e["type"] == *t))
        .or_else(|| events.iter().find(|e| e["type"] == "response.created"))
        .map(|e| e["response"].clone())
        .unwrap_or_else(|| json!({"object": "response", "status": "in_progress"}));
    let has_output = response["output"]
        .as_array()
        .is_some_and(|output| !output.is_empty());
    if !has_output {
        let mut done: Vec<(u64, Value)> = events
            .iter()
            .filter(|e| e["type"] == "response.output_item.done")
            .map(|e| (e["output_index"].as_u64().unwrap_or(0), e["item"].clone()))
            .collect();
        done.sort_by_key(|(index, _)| *index);
        response["output"] = done.into_iter().map(|(_, item)| item).collect();
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_events_fold_into_the_response_a_provider_would_send() {
        let item = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "add",
            "arguments": "{\"a\":1}"});
        let events = [
            created(),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
                "output": [], "usage": usage(3, 1, 2, 0)}}),
        ];
        let response = responses_response(&events);
        assert_eq!(response["id"], "resp_1");
        assert_eq!(response["status"], "completed");
        assert_eq!(response["output"], json!([item]));
        assert_eq!(
            response["usage"]["input_tokens_details"]["cached_tokens"],
            1
        );
        // A script that lists the output itself keeps it.
        let text = Reply::responses_text("Hi there").whole.unwrap();
        assert_eq!(text["output"][0]["content"][0]["text"], "Hi there");
    }
}
