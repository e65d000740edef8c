//! A streamed answer folded into the one JSON body a provider sends when the request does not ask to stream, so
//! one scripted reply serves both kinds of request.

use serde_json::{json, Map, Value};

/// OpenAI Chat Completions chunks → one `chat.completion`: text and reasoning concatenated, tool calls
/// assembled by index, the last finish reason and usage.
pub(super) fn openai_completion(chunks: &[Value]) -> Value {
    let first = |key: &str| chunks.iter().find_map(|c| c.get(key).cloned());
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = Value::Null;
    let mut usage = None;
    // Fields of the message and the choice other than those folded above, as the last chunk to send them had
    // them (a list joined across chunks).
    let mut message_extra = Map::new();
    let mut choice_extra = Map::new();
    let keep = |into: &mut Map<String, Value>, key: &str, value: &Value| match (
        into.get_mut(key),
        value,
    ) {
        (Some(Value::Array(list)), Value::Array(more)) => list.extend(more.iter().cloned()),
        _ => {
            into.insert(key.to_owned(), value.clone());
        }
    };
    for chunk in chunks {
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = Some(u.clone());
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            continue;
        };
        for choice in choices {
            if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
                finish = reason.clone();
            }
            for (key, value) in choice.as_object().into_iter().flatten() {
                if !["index", "delta", "finish_reason"].contains(&key.as_str()) && !value.is_null()
                {
                    keep(&mut choice_extra, key, value);
                }
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(text) = delta.get("content").and_then(Value::as_str) {
                content.push_str(text);
            }
            for (key, value) in delta.as_object().into_iter().flatten() {
                let folded = ["role", "content", "reasoning_content", "tool_calls"];
                if !folded.contains(&key.as_str()) && !value.is_null() {
                    keep(&mut message_extra, key, value);
                }
            }
            if let Some(text) = delta.get("reasoning_content").and_then(Value::as_str) {
                reasoning.push_str(text);
            }
            for fragment in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let index = fragment["index"].as_u64().unwrap_or(0) as usize;
                while calls.len() <= index {
                    calls.push(json!({"id": "", "type": "function",
                        "function": {"name": "", "arguments": ""}}));
                }
                let call = &mut calls[index];
                if let Some(id) = fragment.get("id").and_then(Value::as_str) {
                    call["id"] = id.into();
                }
                let function = &fragment["function"];
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    call["function"]["name"] = name.into();
                }
                if let Some(piece) = function.get("arguments").and_then(Value::as_str) {
                    let joined = format!(
                        "{}{piece}",
                        call["function"]["arguments"].as_str().unwrap_or("")
                    );
                    call["function"]["arguments"] = joined.into();
                }
            }
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert(
        "content".into(),
        if content.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            content.into()
        },
    );
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), reasoning.into());
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), calls.into());
    }
    message.extend(message_extra);
    let mut choice = json!({"index": 0, "message": message, "finish_reason": finish});
    choice.as_object_mut().unwrap().extend(choice_extra);
    let mut completion = json!({
        "id": first("id").unwrap_or_else(|| "chatcmpl-scripted".into()),
        "object": "chat.completion",
        "created": first("created").unwrap_or_else(|| 0.into()),
        "model": first("model").unwrap_or_else(|| "scripted-model".into()),
        "choices": [choice],
    });
    if let Some(usage) = usage {
        completion["usage"] = usage;
    }
    completion
}

/// Anthropic Messages stream events → one `message`: the `message_start` message with its content blocks
/// (text, thinking, tool use with the JSON input parsed), stop reason and output usage filled in.
pub(super) fn anthropic_message(events: &[Value]) -> Value {
    let mut message = events
        .iter()
        .find(|e| e["type"] == "message_start")
        .map(|e| e["message"].clone())
        .unwrap_or_else(|| json!({"type": "message", "role": "assistant"}));
    let mut blocks: Vec<Value> = Vec::new();
    let mut inputs: Vec<String> = Vec::new();
    for event in events {
        match event["type"].as_str() {
            Some("content_block_start") => {
                let index = event["index"].as_u64().unwrap_or(0) as usize;
                while blocks.len() <= index {
                    blocks.push(Value::Null);
                    inputs.push(String::new());
                }
                blocks[index] = event["content_block"].clone();
            }
            Some("content_block_delta") => {
                let index = event["index"].as_u64().unwrap_or(0) as usize;
                let (Some(block), delta) = (blocks.get_mut(index), &event["delta"]) else {
                    continue;
                };
                let mut append = |field: &str, piece: &Value| {
                    let joined = format!(
                        "{}{}",
                        block[field].as_str().unwrap_or(""),
                        piece.as_str().unwrap_or("")
                    );
                    block[field] = joined.into();
                };
                match delta["type"].as_str() {
                    Some("text_delta") => append("text", &delta["text"]),
                    Some("thinking_delta") => append("thinking", &delta["thinking"]),
                    Some("signature_delta") => append("signature", &delta["signature"]),
                    Some("citations_delta") => match block["citations"].as_array_mut() {
                        Some(citations) => citations.push(delta["citation"].clone()),
                        None => block["citations"] = json!([delta["citation"]]),
                    },
                    Some("input_json_delta") => {
                        inputs[index].push_str(delta["partial_json"].as_str().unwrap_or(""))
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                for (key, value) in event["delta"].as_object().into_iter().flatten() {
                    message[key] = value.clone();
                }
                for (key, value) in event["usage"].as_object().into_iter().flatten() {
                    message["usage"][key] = value.clone();
                }
            }
            _ => {}
        }
    }
    for (block, input) in blocks.iter_mut().zip(&inputs) {
        // A client tool's call or a server tool's (`server_tool_use`): whichever block streamed its input.
        if !input.is_empty() {
            block["input"] = serde_json::from_str(input).unwrap_or(Value::Null);
        }
    }
    message["content"] = blocks.into();
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_chunks_fold_into_the_completion_a_provider_would_send() {
        let chunks = [
            json!({"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hi "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "there", "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": ": 1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
        ];
        let completion = openai_completion(&chunks);
        assert_eq!(completion["id"], "c1");
        assert_eq!(completion["object"], "chat.completion");
        let choice = &completion["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(choice["message"]["content"], "Hi there");
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}}])
        );
        assert_eq!(completion["usage"]["total_tokens"], 5);
    }

    #[test]
    fn anthropic_events_fold_into_the_message_a_provider_would_send() {
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "model": "claude", "content": [], "usage": {"input_tokens": 7, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "add."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"a\": "}}),
            json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "2}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let message = anthropic_message(&events);
        assert_eq!(message["id"], "msg_1");
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["usage"],
            json!({"input_tokens": 7, "output_tokens": 9})
        );
        assert_eq!(
            message["content"],
            json!([{"type": "text", "text": "Let me add."},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2}}])
        );
    }
}
