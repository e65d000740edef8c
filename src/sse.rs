//! An incremental Server-Sent Events decoder, following the WHATWG event-stream parsing rules.
//!
//! Bytes may be split anywhere — mid-line, mid-CRLF, mid-UTF-8 character — and every split yields the same
//! events: only complete lines are interpreted, and a CR at the end of a chunk waits to see whether an LF
//! follows.
//!
//! ```
//! use tower_chat::sse::SseDecoder;
//!
//! let mut decoder = SseDecoder::new();
//! let mut events = Vec::new();
//! decoder.feed(b"event: ping\r\ndata: {\"a\":", &mut |e| events.push(e));
//! decoder.feed(b"1}\r\n\r\n: keep-alive\n\ndata:[DONE]\n\n", &mut |e| events.push(e));
//! assert_eq!(events[0].event.as_deref(), Some("ping"));
//! assert_eq!(events[0].data, "{\"a\":1}");
//! assert_eq!(events[1].data, "[DONE]");
//! ```

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the server named the event.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, when set.
    pub id: Option<String>,
}

/// Incremental decoder state. Feed it chunks in order; it calls back once per complete event.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of a line that is not complete yet.
    partial: Vec<u8>,
    /// The previous chunk ended in CR: an LF at the start of the next chunk belongs to that line break.
    after_cr: bool,
    /// Whether the byte-order mark check at the very start of the stream is done.
    bom_checked: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    id: Option<String>,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        SseDecoder::default()
    }

    /// Feed the next chunk; `emit` is called for each event completed by it.
    pub fn feed(&mut self, mut chunk: &[u8], emit: &mut impl FnMut(SseEvent)) {
        if !self.bom_checked && self.partial.is_empty() && chunk.len() >= 3 {
            // The common case: the first chunk holds the whole (possible) byte-order mark; no copy needed.
            self.bom_checked = true;
            chunk = chunk.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(chunk);
        }
        if !self.bom_checked {
            // The BOM may itself be split across chunks: wait until three bytes are known.
            if self.partial.len() + chunk.len() < 3 && !chunk.is_empty() {
                self.partial.extend_from_slice(chunk);
                return;
            }
            self.bom_checked = true;
            let pending = std::mem::take(&mut self.partial);
            let mut joined = pending;
            joined.extend_from_slice(chunk);
            let start = if joined.starts_with(b"\xEF\xBB\xBF") {
                3
            } else {
                0
            };
            self.feed_lines(&joined[start..], emit);
            return;
        }
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        self.feed_lines(chunk, emit);
    }

    fn feed_lines(&mut self, chunk: &[u8], emit: &mut impl FnMut(SseEvent)) {
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            let line_end = pos;
            let mut next = pos + 1;
            if rest[pos] == b'\r' {
                match rest.get(pos + 1) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.partial.is_empty() {
                self.process_line(&rest[..line_end], emit);
            } else {
                self.partial.extend_from_slice(&rest[..line_end]);
                let line = std::mem::take(&mut self.partial);
                self.process_line(&line, emit);
                // Keep the allocation for the next partial line.
                self.partial = line;
                self.partial.clear();
            }
            rest = &rest[next..];
        }
        self.partial.extend_from_slice(rest);
    }

    /// The stream ended: a final event whose blank line never came is dispatched (servers that close right
    /// after the last `data:` line are common); an unterminated last line is processed first.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            let mut last = None;
            self.process_line(&line, &mut |e| last = Some(e));
            if last.is_some() {
                return last;
            }
        }
        self.take_event()
    }

    fn process_line(&mut self, line: &[u8], emit: &mut impl FnMut(SseEvent)) {
        if line.is_empty() {
            if let Some(event) = self.take_event() {
                emit(event);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                push_utf8(&mut self.data, value);
            }
            b"event" => self.event = Some(utf8(value)),
            // The spec ignores ids containing NUL.
            b"id" if !value.contains(&0) => self.id = Some(utf8(value)),
            // `retry:` and unknown fields are ignored, as the spec says.
            _ => {}
        }
    }

    fn take_event(&mut self) -> Option<SseEvent> {
        if !self.has_data {
            // An event with no data is not dispatched; its name is forgotten.
            self.event = None;
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event: self.event.take(),
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        })
    }
}

fn push_utf8(into: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => into.push_str(text),
        Err(_) => into.push_str(&String::from_utf8_lossy(bytes)),
    }
}

fn utf8(bytes: &[u8]) -> String {
    let mut s = String::new();
    push_utf8(&mut s, bytes);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk, &mut |e| events.push(e));
        }
        events.extend(decoder.finish());
        events
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn lf_crlf_and_cr_line_endings_are_equivalent() {
        for ending in ["\n", "\r\n", "\r"] {
            let text = format!("data: a{ending}{ending}data: b{ending}{ending}");
            assert_eq!(
                data(&decode_chunks(&[text.as_bytes()])),
                ["a", "b"],
                "{ending:?}"
            );
        }
    }

    #[test]
    fn comments_keepalives_event_names_multiline_data_and_no_space() {
        let text = b": keep-alive\n\nevent: message_start\ndata:{\"x\":1}\n\ndata: line1\ndata: line2\nid: 7\nretry: 10\n\n";
        let events = decode_chunks(&[text]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event.as_deref(), Some("message_start"));
        assert_eq!(events[0].data, "{\"x\":1}");
        assert_eq!(events[1].data, "line1\nline2");
        assert_eq!(events[1].id.as_deref(), Some("7"));
        assert_eq!(events[1].event, None);
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_its_name_is_forgotten() {
        let events = decode_chunks(&[b"event: ping\n\ndata: x\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event, None);
    }

    #[test]
    fn split_crlf_across_chunks_is_one_line_break() {
        let events = decode_chunks(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(data(&events), ["a", "b"]);
    }

    #[test]
    fn split_inside_a_utf8_character() {
        let text = "data: héllo ✓\n\n".as_bytes();
        let cut = text.iter().position(|&b| b == 0xC3).unwrap() + 1;
        let events = decode_chunks(&[&text[..cut], &text[cut..]]);
        assert_eq!(data(&events), ["héllo ✓"]);
    }

    #[test]
    fn byte_order_mark_is_stripped_even_when_split() {
        let events = decode_chunks(&[b"\xEF", b"\xBB\xBFdata: a\n\n"]);
        assert_eq!(data(&events), ["a"]);
    }

    #[test]
    fn a_final_event_without_its_blank_line_is_still_dispatched_at_the_end() {
        assert_eq!(data(&decode_chunks(&[b"data: a\n\ndata: b"])), ["a", "b"]);
        assert_eq!(data(&decode_chunks(&[b"data: a\n\ndata: b\n"])), ["a", "b"]);
    }

    proptest! {
        #[test]
        fn every_chunking_yields_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..12)) {
            let text = "event: a\r\ndata: {\"t\":\"héllo\"}\r\n\r\n: c\n\ndata:x\ndata: y\n\ndata: [DONE]\r\r".as_bytes();
            let whole = decode_chunks(&[text]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (text.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut start = 0;
            for cut in cuts {
                chunks.push(&text[start..cut]);
                start = cut;
            }
            chunks.push(&text[start..]);
            prop_assert_eq!(decode_chunks(&chunks), whole);
        }
    }
}
