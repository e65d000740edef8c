//! The AWS event-stream framing (`application/vnd.amazon.eventstream`) of ConverseStream's body.
//!
//! A frame is a 12-byte prelude (total length, headers length, the prelude's CRC-32), typed headers, the payload
//! and the CRC-32 of everything before it. Both CRCs are checked; a frame whose lengths or CRCs do not add up,
//! or a body that ends inside a frame, is a [`ErrorKind::Protocol`](crate::ErrorKind::Protocol) error.
//!
//! Written here rather than taken from `aws-smithy-eventstream`, whose dependencies would fit (only `crc32fast`
//! beyond the smithy types the signer brings): its decoder builds an owned `Message` per frame, every header
//! name and value copied into its own `Bytes` and collected in a `Vec`, from a `Buf` it takes ownership of. This
//! one reads the three headers Bedrock's decoder needs straight from the chunk, copies only the payload, and
//! touches buffered bytes only for a frame cut across chunks: per event the framing costs the two CRCs over the
//! frame and one copy of the payload (BENCHMARKS.md, "Bedrock decode").

use crate::error::ChatError;
use crate::transport::Framing;

/// The prelude: total length, headers length, prelude CRC.
const PRELUDE: usize = 12;
/// The smallest frame: a prelude and the message CRC.
const MIN_FRAME: usize = PRELUDE + 4;
/// The largest frame AWS sends (16 MiB); a larger length is a corrupt prelude, not a reason to buffer.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// What a frame is, from its `:message-type` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// An event; its `:event-type` (`messageStart`, `contentBlockDelta`, …).
    Event(String),
    /// A modelled exception; its `:exception-type` (`throttlingException`, …).
    Exception(String),
    /// An unmodelled error: `:error-code` and `:error-message`.
    Error {
        /// The error code.
        code: String,
        /// The message.
        message: String,
    },
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub kind: MessageKind,
    pub payload: Vec<u8>,
}

/// A frame, or why the bytes are not one (the first error ends the stream).
pub(crate) type Frame = Result<Message, ChatError>;

/// Cuts an event-stream body into frames, fed in chunks split anywhere.
#[derive(Debug, Default)]
pub struct EventStreamFraming {
    /// The start of a frame that is not complete yet.
    partial: Vec<u8>,
    /// The length of the frame in `partial`, once its prelude is in.
    expected: Option<usize>,
    failed: bool,
}

impl EventStreamFraming {
    fn fail(&mut self, error: ChatError, input: &mut &[u8]) -> Option<Frame> {
        self.failed = true;
        self.partial = Vec::new();
        *input = &[];
        Some(Err(error))
    }
}

impl Framing for EventStreamFraming {
    type Frame = Frame;

    fn decode_next(&mut self, input: &mut &[u8]) -> Option<Frame> {
        if self.failed {
            *input = &[];
            return None;
        }
        if self.partial.is_empty() && input.len() >= PRELUDE {
            // The common case: the whole frame is in this chunk, decoded where it lies.
            let total = match frame_length(&input[..PRELUDE]) {
                Ok(total) => total,
                Err(error) => return self.fail(error, input),
            };
            if input.len() >= total {
                let (frame, rest) = input.split_at(total);
                *input = rest;
                return match decode_frame(frame) {
                    Ok(message) => Some(Ok(message)),
                    Err(error) => self.fail(error, input),
                };
            }
            self.expected = Some(total);
        }
        while !input.is_empty() {
            let want = self.expected.unwrap_or(PRELUDE);
            let take = (want - self.partial.len()).min(input.len());
            self.partial.extend_from_slice(&input[..take]);
            *input = &input[take..];
            if self.partial.len() < want {
                return None;
            }
            if self.expected.is_none() {
                match frame_length(&self.partial) {
                    Ok(total) => {
                        self.partial.reserve_exact(total - PRELUDE);
                        self.expected = Some(total);
                    }
                    Err(error) => return self.fail(error, input),
                }
                continue;
            }
            let frame = std::mem::take(&mut self.partial);
            self.expected = None;
            return match decode_frame(&frame) {
                Ok(message) => Some(Ok(message)),
                Err(error) => self.fail(error, input),
            };
        }
        None
    }

    fn finish(&mut self) -> Option<Frame> {
        if self.failed || self.partial.is_empty() {
            return None;
        }
        self.failed = true;
        let have = std::mem::take(&mut self.partial).len();
        let what = match self.expected {
            Some(total) => {
                format!("the body ended inside an event-stream frame ({have} of {total} bytes)")
            }
            None => {
                format!("the body ended inside an event-stream prelude ({have} of {PRELUDE} bytes)")
            }
        };
        Some(Err(ChatError::new(crate::ErrorKind::Protocol, what)))
    }
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn read_u16(bytes: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]))
}

/// The frame length a prelude announces, once its CRC and lengths check out.
fn frame_length(prelude: &[u8]) -> Result<usize, ChatError> {
    let total = read_u32(prelude, 0) as usize;
    let headers = read_u32(prelude, 4) as usize;
    if crc32fast::hash(&prelude[..8]) != read_u32(prelude, 8) {
        return Err(ChatError::protocol(
            "an event-stream prelude whose CRC does not match",
            &prelude[..PRELUDE],
        ));
    }
    if !(MIN_FRAME..=MAX_FRAME).contains(&total) || headers > total - MIN_FRAME {
        return Err(ChatError::protocol(
            format_args!(
                "an event-stream prelude of {total} bytes with {headers} bytes of headers"
            ),
            &prelude[..PRELUDE],
        ));
    }
    Ok(total)
}

/// A whole frame (its prelude already checked) as a message.
fn decode_frame(frame: &[u8]) -> Result<Message, ChatError> {
    let crc_at = frame.len() - 4;
    if crc32fast::hash(&frame[..crc_at]) != read_u32(frame, crc_at) {
        return Err(ChatError::protocol(
            "an event-stream frame whose CRC does not match",
            frame,
        ));
    }
    let headers_end = PRELUDE + read_u32(frame, 4) as usize;
    let mut headers = Headers::default();
    read_headers(&frame[PRELUDE..headers_end], &mut headers)
        .map_err(|what| ChatError::protocol(format_args!("event-stream headers: {what}"), frame))?;
    let kind = match headers.message_type.unwrap_or("event") {
        "event" => MessageKind::Event(headers.event_type.unwrap_or_default().to_owned()),
        "exception" => {
            MessageKind::Exception(headers.exception_type.unwrap_or_default().to_owned())
        }
        "error" => MessageKind::Error {
            code: headers.error_code.unwrap_or_default().to_owned(),
            message: headers.error_message.unwrap_or_default().to_owned(),
        },
        other => {
            return Err(ChatError::protocol(
                format_args!("an event-stream frame of message type {other:?}"),
                frame,
            ))
        }
    };
    Ok(Message {
        kind,
        payload: frame[headers_end..crc_at].to_vec(),
    })
}

/// The string headers a frame is read by, borrowed from it.
#[derive(Default)]
struct Headers<'a> {
    message_type: Option<&'a str>,
    event_type: Option<&'a str>,
    exception_type: Option<&'a str>,
    error_code: Option<&'a str>,
    error_message: Option<&'a str>,
}

/// Walk the headers, keeping the ones a frame is read by and stepping over the others by their type's size.
fn read_headers<'a>(mut bytes: &'a [u8], headers: &mut Headers<'a>) -> Result<(), &'static str> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], &'static str> {
        if bytes.len() < n {
            return Err("a header runs past the headers");
        }
        let (head, rest) = bytes.split_at(n);
        *bytes = rest;
        Ok(head)
    }
    while !bytes.is_empty() {
        let name_len = usize::from(take(&mut bytes, 1)?[0]);
        let name = take(&mut bytes, name_len)?;
        let value_type = take(&mut bytes, 1)?[0];
        let fixed = match value_type {
            0 | 1 => 0,
            2 => 1,
            3 => 2,
            4 => 4,
            5 | 8 => 8,
            9 => 16,
            6 | 7 => {
                let len = read_u16(take(&mut bytes, 2)?, 0);
                let value = take(&mut bytes, len)?;
                if value_type == 7 {
                    let value =
                        std::str::from_utf8(value).map_err(|_| "a string header is not UTF-8")?;
                    let slot = match name {
                        b":message-type" => &mut headers.message_type,
                        b":event-type" => &mut headers.event_type,
                        b":exception-type" => &mut headers.exception_type,
                        b":error-code" => &mut headers.error_code,
                        b":error-message" => &mut headers.error_message,
                        _ => continue,
                    };
                    *slot = Some(value);
                }
                continue;
            }
            _ => return Err("a header of an unknown value type"),
        };
        take(&mut bytes, fixed)?;
    }
    Ok(())
}

/// A frame with these string headers and payload (what the scripted server and the tests send).
#[cfg(any(test, feature = "test-server"))]
pub(crate) fn encode_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut header_bytes = Vec::new();
    for (name, value) in headers {
        header_bytes.push(name.len() as u8);
        header_bytes.extend_from_slice(name.as_bytes());
        header_bytes.push(7);
        header_bytes.extend_from_slice(&(value.len() as u16).to_be_bytes());
        header_bytes.extend_from_slice(value.as_bytes());
    }
    let total = PRELUDE + header_bytes.len() + payload.len() + 4;
    let mut frame = Vec::with_capacity(total);
    frame.extend_from_slice(&(total as u32).to_be_bytes());
    frame.extend_from_slice(&(header_bytes.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&frame);
    frame.extend_from_slice(&prelude_crc.to_be_bytes());
    frame.extend_from_slice(&header_bytes);
    frame.extend_from_slice(payload);
    let crc = crc32fast::hash(&frame);
    frame.extend_from_slice(&crc.to_be_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn event(event_type: &str, payload: &str) -> Vec<u8> {
        encode_frame(
            &[
                (":event-type", event_type),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    fn decode_all(framing: &mut EventStreamFraming, mut input: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = framing.decode_next(&mut input) {
            frames.push(frame);
        }
        assert!(input.is_empty());
        frames
    }

    #[test]
    fn frames_decode_whole_and_split_at_every_byte() {
        let mut body = event("messageStart", r#"{"role":"assistant"}"#);
        body.extend(event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"}}"#,
        ));
        let whole = decode_all(&mut EventStreamFraming::default(), &body);
        assert_eq!(whole.len(), 2);
        let first = whole[0].as_ref().unwrap();
        assert_eq!(first.kind, MessageKind::Event("messageStart".into()));
        assert_eq!(first.payload, br#"{"role":"assistant"}"#);
        for cut in 0..body.len() {
            let mut framing = EventStreamFraming::default();
            let mut frames = decode_all(&mut framing, &body[..cut]);
            frames.extend(decode_all(&mut framing, &body[cut..]));
            assert!(framing.finish().is_none());
            let frames: Vec<Message> = frames.into_iter().map(Result::unwrap).collect();
            let expected: Vec<Message> =
                whole.iter().map(|f| f.as_ref().unwrap().clone()).collect();
            assert_eq!(frames, expected, "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_is_a_protocol_error() {
        let frame = event("messageStop", r#"{"stopReason":"end_turn"}"#);
        for at in 0..frame.len() {
            let mut broken = frame.clone();
            broken[at] ^= 0x01;
            let mut framing = EventStreamFraming::default();
            let mut frames = decode_all(&mut framing, &broken);
            frames.extend(framing.finish());
            let error = frames
                .into_iter()
                .find_map(Result::err)
                .unwrap_or_else(|| panic!("flipping byte {at} went unnoticed"));
            assert_eq!(error.kind(), &ErrorKind::Protocol);
        }
    }

    #[test]
    fn a_body_cut_inside_a_frame_is_an_error_at_its_end() {
        let frame = event("messageStop", r#"{"stopReason":"end_turn"}"#);
        for cut in 1..frame.len() {
            let mut framing = EventStreamFraming::default();
            assert!(decode_all(&mut framing, &frame[..cut]).is_empty());
            let error = framing.finish().unwrap().unwrap_err();
            assert_eq!(error.kind(), &ErrorKind::Protocol);
            assert!(
                error.message().contains("ended inside"),
                "{}",
                error.message()
            );
        }
    }

    #[test]
    fn exceptions_and_errors_are_told_apart() {
        let exception = encode_frame(
            &[
                (":exception-type", "throttlingException"),
                (":message-type", "exception"),
            ],
            br#"{"message":"slow down"}"#,
        );
        let error = encode_frame(
            &[
                (":error-code", "InternalFailure"),
                (":error-message", "boom"),
                (":message-type", "error"),
            ],
            b"",
        );
        let mut body = exception;
        body.extend(error);
        let frames = decode_all(&mut EventStreamFraming::default(), &body);
        assert_eq!(
            frames[0].as_ref().unwrap().kind,
            MessageKind::Exception("throttlingException".into())
        );
        assert_eq!(
            frames[1].as_ref().unwrap().kind,
            MessageKind::Error {
                code: "InternalFailure".into(),
                message: "boom".into()
            }
        );
    }
}
