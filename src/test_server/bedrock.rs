//! Scripted Bedrock answers (feature `bedrock`): ConverseStream events as AWS event-stream frames with correct
//! CRCs, the same answer folded into one Converse response for a `converse` request, exception frames, and the
//! check of a request's SigV4 `authorization` header.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{json, Map, Value};

use super::{Part, RecordedRequest, Reply};
use crate::bedrock::eventstream::encode_frame;
use crate::bedrock::AwsCredentials;

/// One ConverseStream event frame: `:event-type` `event_type`, a JSON payload.
pub fn bedrock_event(event_type: &str, payload: &str) -> Vec<u8> {
    encode_frame(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.as_bytes(),
    )
}

/// One exception frame, as Bedrock sends a failure mid-stream: `:exception-type` `exception_type`
/// (`throttlingException`, `modelStreamErrorException`, …) and `{"message": message}`.
pub fn bedrock_exception(exception_type: &str, message: &str) -> Vec<u8> {
    encode_frame(
        &[
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({ "message": message }).to_string().as_bytes(),
    )
}

impl Reply {
    /// A ConverseStream reply: each `(event type, payload)` is one frame, sent as one chunk; a `converse`
    /// request (not streaming) gets the same answer folded into one Converse response.
    pub fn bedrock_stream(events: &[(&str, Value)]) -> Self {
        let frames: Vec<Part> = events
            .iter()
            .map(|(event_type, payload)| {
                Part::Bytes(Bytes::from(bedrock_event(event_type, &payload.to_string())))
            })
            .collect();
        Reply {
            headers: vec![(
                "content-type".into(),
                "application/vnd.amazon.eventstream".into(),
            )],
            parts: frames,
            whole: Some(converse_response(events)),
            ..Reply::json(200, Value::Null)
        }
    }

    /// A Bedrock answer of plain text, a word per delta, with `end_turn` and usage.
    pub fn bedrock_text(text: &str) -> Self {
        let mut events = vec![("messageStart", json!({"role": "assistant"}))];
        for word in text.split_inclusive(' ') {
            events.push((
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": word}}),
            ));
        }
        events.extend([
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("messageStop", json!({"stopReason": "end_turn"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17},
                    "metrics": {"latencyMs": 120}}),
            ),
        ]);
        Reply::bedrock_stream(&events)
    }

    /// A Bedrock answer calling tools, `(toolUseId, name, input JSON)`, each input streamed in two fragments,
    /// with `tool_use` and usage.
    pub fn bedrock_tool_use(calls: &[(&str, &str, Value)]) -> Self {
        let mut events = vec![("messageStart", json!({"role": "assistant"}))];
        for (i, (id, name, input)) in calls.iter().enumerate() {
            let input = input.to_string();
            let (head, tail) = input.split_at(input.len() / 2);
            events.push((
                "contentBlockStart",
                json!({"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
            ));
            for fragment in [head, tail] {
                events.push((
                    "contentBlockDelta",
                    json!({"contentBlockIndex": i, "delta": {"toolUse": {"input": fragment}}}),
                ));
            }
            events.push(("contentBlockStop", json!({"contentBlockIndex": i})));
        }
        events.extend([
            ("messageStop", json!({"stopReason": "tool_use"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 30, "outputTokens": 8, "totalTokens": 38},
                    "metrics": {"latencyMs": 80}}),
            ),
        ]);
        Reply::bedrock_stream(&events)
    }

    /// The same stream with an exception frame after its first `events_before` frames, as Bedrock fails
    /// mid-stream.
    pub fn bedrock_failing(
        self,
        events_before: usize,
        exception_type: &str,
        message: &str,
    ) -> Self {
        let mut parts: Vec<Part> = self.parts.into_iter().take(events_before).collect();
        parts.push(Part::Bytes(Bytes::from(bedrock_exception(
            exception_type,
            message,
        ))));
        Reply {
            parts,
            whole: None,
            ..self
        }
    }
}

/// A ConverseStream's events folded into the Converse response that says the same.
fn converse_response(events: &[(&str, Value)]) -> Value {
    let mut blocks: Vec<(u64, Value)> = Vec::new();
    let mut inputs: Vec<(u64, String)> = Vec::new();
    let mut response = Map::new();
    for (event_type, payload) in events {
        let at = payload["contentBlockIndex"].as_u64().unwrap_or(0);
        let position = blocks.iter().position(|(i, _)| *i == at);
        match *event_type {
            "contentBlockStart" => {
                if let Some(tool) = payload["start"].get("toolUse") {
                    blocks.push((at, json!({"toolUse": tool.clone()})));
                    inputs.push((at, String::new()));
                }
            }
            "contentBlockDelta" => {
                let delta = &payload["delta"];
                if let Some(text) = delta.get("text").and_then(Value::as_str) {
                    match position {
                        Some(p) => {
                            let block = &mut blocks[p].1["text"];
                            *block = json!(format!("{}{text}", block.as_str().unwrap_or("")));
                        }
                        None => blocks.push((at, json!({ "text": text }))),
                    }
                } else if let Some(input) = delta["toolUse"].get("input").and_then(Value::as_str) {
                    if let Some((_, joined)) = inputs.iter_mut().find(|(i, _)| *i == at) {
                        joined.push_str(input);
                    }
                } else if let Some(reasoning) = delta.get("reasoningContent") {
                    let p = position.unwrap_or_else(|| {
                        blocks.push((at, json!({"reasoningContent": {}})));
                        blocks.len() - 1
                    });
                    let block = &mut blocks[p].1["reasoningContent"];
                    if let Some(redacted) = reasoning.get("redactedContent") {
                        block["redactedContent"] = redacted.clone();
                    }
                    for key in ["text", "signature"] {
                        if let Some(piece) = reasoning.get(key).and_then(Value::as_str) {
                            let field = &mut block["reasoningText"][key];
                            *field = json!(format!("{}{piece}", field.as_str().unwrap_or("")));
                        }
                    }
                }
            }
            "messageStop" => {
                for (key, value) in payload.as_object().into_iter().flatten() {
                    response.insert(key.clone(), value.clone());
                }
            }
            "metadata" => {
                for (key, value) in payload.as_object().into_iter().flatten() {
                    response.insert(key.clone(), value.clone());
                }
            }
            _ => {}
        }
    }
    for (at, joined) in inputs {
        if let Some((_, block)) = blocks.iter_mut().find(|(i, _)| *i == at) {
            block["toolUse"]["input"] = serde_json::from_str(&joined).unwrap_or(Value::Null);
        }
    }
    let content: Vec<Value> = blocks.into_iter().map(|(_, block)| block).collect();
    response.insert(
        "output".into(),
        json!({"message": {"role": "assistant", "content": content}}),
    );
    Value::Object(response)
}

/// What a SigV4 `authorization` header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SigV4Authorization {
    /// The access key id.
    pub access_key_id: String,
    /// The scope's date, `YYYYMMDD`.
    pub date: String,
    /// The scope's region.
    pub region: String,
    /// The scope's service (`bedrock`).
    pub service: String,
    /// The signed headers, in order.
    pub signed_headers: Vec<String>,
    /// The signature, 64 hex digits.
    pub signature: String,
}

/// Read the request's `authorization` header as a SigV4 one: `AWS4-HMAC-SHA256 Credential=…/…/…/…/aws4_request,
/// SignedHeaders=…, Signature=…`; an error says what is missing or malformed.
pub fn parse_sigv4_authorization(request: &RecordedRequest) -> Result<SigV4Authorization, String> {
    let header = request
        .headers
        .get("authorization")
        .ok_or("no authorization header")?
        .to_str()
        .map_err(|_| "an authorization header that is not text")?;
    let rest = header
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| format!("not a SigV4 authorization: {header:?}"))?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for field in rest.split(", ") {
        match field.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => return Err(format!("an unknown authorization field {field:?}")),
        }
    }
    let scope: Vec<&str> = credential.ok_or("no Credential")?.split('/').collect();
    let [access_key_id, date, region, service, "aws4_request"] = scope[..] else {
        return Err(format!("a malformed credential scope {scope:?}"));
    };
    let signature = signature.ok_or("no Signature")?;
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("a malformed signature {signature:?}"));
    }
    let signed_headers: Vec<String> = signed
        .ok_or("no SignedHeaders")?
        .split(';')
        .map(str::to_owned)
        .collect();
    for required in ["host", "x-amz-date"] {
        if !signed_headers.iter().any(|h| h == required) {
            return Err(format!("{required} is not signed"));
        }
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("a malformed scope date {date:?}"));
    }
    Ok(SigV4Authorization {
        access_key_id: access_key_id.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
        signed_headers,
        signature: signature.to_owned(),
    })
}

/// Check the request's SigV4 signature against `credentials`: the headers it names, the path, the body and
/// `x-amz-date` signed again must give the same `authorization`.
pub fn check_bedrock_signature(
    request: &RecordedRequest,
    credentials: &AwsCredentials,
) -> Result<(), String> {
    let auth = parse_sigv4_authorization(request)?;
    if auth.access_key_id != credentials.access_key_id() {
        return Err(format!("signed by {:?}", auth.access_key_id));
    }
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| format!("no {name} header"))
    };
    let time = parse_amz_date(header("x-amz-date")?)?;
    let query = request
        .query
        .as_deref()
        .map_or_else(String::new, |q| format!("?{q}"));
    let mut resigned =
        http::Request::post(format!("http://{}{}{query}", header("host")?, request.path))
            .body(Full::new(request.raw_body.clone()))
            .map_err(|e| e.to_string())?;
    for name in &auth.signed_headers {
        if matches!(
            name.as_str(),
            "host" | "x-amz-date" | "x-amz-security-token"
        ) {
            continue;
        }
        let value = request
            .headers
            .get(name.as_str())
            .ok_or_else(|| format!("the signed header {name} was not received"))?;
        resigned.headers_mut().insert(
            http::HeaderName::try_from(name.as_str()).map_err(|e| e.to_string())?,
            value.clone(),
        );
    }
    crate::bedrock::sign::sign_request(
        &mut resigned,
        &request.raw_body,
        credentials,
        &auth.region,
        time,
    )
    .map_err(|e| e.to_string())?;
    let expected = resigned.headers()["authorization"]
        .to_str()
        .unwrap_or_default();
    let got = header("authorization")?;
    if expected != got {
        return Err(format!(
            "signature mismatch: expected {expected:?}, got {got:?}"
        ));
    }
    Ok(())
}

/// `YYYYMMDDTHHMMSSZ` as a time.
fn parse_amz_date(text: &str) -> Result<SystemTime, String> {
    let malformed = || format!("a malformed x-amz-date {text:?}");
    if text.len() != 16 || &text[8..9] != "T" || !text.ends_with('Z') {
        return Err(malformed());
    }
    let number = |range: std::ops::Range<usize>| -> Result<i64, String> {
        text.get(range)
            .and_then(|s| s.parse().ok())
            .ok_or_else(malformed)
    };
    let (year, month, day) = (number(0..4)?, number(4..6)?, number(6..8)?);
    let seconds = number(9..11)? * 3600 + number(11..13)? * 60 + number(13..15)?;
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total = u64::try_from(days * 86_400 + seconds).map_err(|_| malformed())?;
    Ok(UNIX_EPOCH + Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_dates_read_as_times() {
        assert_eq!(
            parse_amz_date("20150830T123600Z").unwrap(),
            UNIX_EPOCH + Duration::from_secs(1_440_938_160)
        );
        assert!(parse_amz_date("2015-08-30T12:36Z").is_err());
    }

    #[test]
    fn a_folded_stream_is_the_converse_response() {
        let reply = Reply::bedrock_tool_use(&[("tu_1", "weather", json!({"city": "Oslo"}))]);
        let whole = reply.whole.unwrap();
        assert_eq!(
            whole["output"]["message"]["content"],
            json!([{"toolUse": {"toolUseId": "tu_1", "name": "weather", "input": {"city": "Oslo"}}}])
        );
        assert_eq!(whole["stopReason"], "tool_use");
        assert_eq!(whole["usage"]["inputTokens"], 30);
    }
}
