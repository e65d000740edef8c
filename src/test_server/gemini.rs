//! Scripted Gemini answers: `streamGenerateContent?alt=sse` events (CRLF-separated, as Google sends them) and,
//! for a `generateContent` request, the same answer folded into one `GenerateContentResponse`.

use serde_json::{json, Map, Value};

use super::Reply;

impl Reply {
    /// A Gemini streaming reply: each JSON value is one `GenerateContentResponse` event; a request to
    /// `:generateContent` (not streaming) gets the same answer as one response.
    pub fn gemini_stream(chunks: &[Value]) -> Self {
        let events: Vec<String> = chunks
            .iter()
            .map(|c| format!("data: {c}\r\n\r\n"))
            .collect();
        Reply {
            whole: Some(gemini_response(chunks)),
            ..Reply::sse_chunks(events)
        }
    }

    /// A Gemini answer of plain text, a word per event, with usage and a `STOP` finish.
    pub fn gemini_text(text: &str) -> Self {
        let words: Vec<&str> = text.split_inclusive(' ').collect();
        let last = words.len().saturating_sub(1);
        let chunks: Vec<Value> = words
            .iter()
            .enumerate()
            .map(|(i, word)| {
                let mut chunk = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": word}]},
                    "index": 0}], "modelVersion": "gemini-scripted", "responseId": "scripted-response"});
                if i == last {
                    chunk["candidates"][0]["finishReason"] = json!("STOP");
                    chunk["usageMetadata"] = json!({"promptTokenCount": 12, "candidatesTokenCount": 5,
                        "totalTokenCount": 17});
                }
                chunk
            })
            .collect();
        Reply::gemini_stream(&chunks)
    }

    /// A Gemini answer calling functions, all in one event as Gemini sends them: `(name, args JSON)`; the first
    /// call carries `signature` as its `thoughtSignature`.
    pub fn gemini_function_calls(calls: &[(&str, Value)], signature: Option<&str>) -> Self {
        let parts: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                let mut part = json!({"functionCall": {"name": name, "args": args}});
                if let (0, Some(signature)) = (i, signature) {
                    part["thoughtSignature"] = json!(signature);
                }
                part
            })
            .collect();
        Reply::gemini_stream(&[json!({
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 30, "candidatesTokenCount": 8, "thoughtsTokenCount": 40,
                "totalTokenCount": 78},
            "modelVersion": "gemini-scripted", "responseId": "scripted-calls"
        })])
    }
}

/// Gemini events → one `GenerateContentResponse`: the first candidate's parts concatenated (adjacent text of the
/// same kind merged), the last finish reason and usage, the first id and model.
fn gemini_response(chunks: &[Value]) -> Value {
    let mut parts: Vec<Value> = Vec::new();
    let mut finish = None;
    let mut top = Map::new();
    for chunk in chunks {
        for key in ["responseId", "modelVersion"] {
            if let Some(value) = chunk.get(key) {
                top.entry(key).or_insert_with(|| value.clone());
            }
        }
        for key in ["usageMetadata", "promptFeedback"] {
            if let Some(value) = chunk.get(key) {
                top.insert(key.into(), value.clone());
            }
        }
        let Some(candidate) = chunk.get("candidates").and_then(|c| c.get(0)) else {
            continue;
        };
        if let Some(reason) = candidate.get("finishReason") {
            finish = Some(reason.clone());
        }
        for part in candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mergeable = |p: &Value| {
                p.get("text").is_some()
                    && p.get("thoughtSignature").is_none()
                    && p.get("functionCall").is_none()
            };
            match parts.last_mut() {
                Some(last)
                    if mergeable(last)
                        && mergeable(part)
                        && last.get("thought") == part.get("thought") =>
                {
                    let text = format!(
                        "{}{}",
                        last["text"].as_str().unwrap_or(""),
                        part["text"].as_str().unwrap_or("")
                    );
                    last["text"] = json!(text);
                }
                _ => parts.push(part.clone()),
            }
        }
    }
    if finish.is_some() || !parts.is_empty() {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(finish) = finish {
            candidate["finishReason"] = finish;
        }
        top.insert("candidates".into(), json!([candidate]));
    }
    Value::Object(top)
}
