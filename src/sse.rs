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
        while let Some(event) = self.decode_next(&mut chunk) {
            emit(event);
        }
    }

    /// Decode from the front of `input` until one event completes and return it, leaving `input` just past the
    /// line that completed it; `None` once `input` is used up (an unfinished line is kept for the next call).
    ///
    /// This is [`feed`](Self::feed) one event at a time: a consumer that maps each event before decoding the next
    /// keeps one event's worth of data alive instead of a whole chunk's.
    ///
    /// ```
    /// use tower_chat::sse::SseDecoder;
    ///
    /// let mut decoder = SseDecoder::new();
    /// let mut input: &[u8] = b"data: a\n\ndata: b\n\ndata: c";
    /// assert_eq!(decoder.decode_next(&mut input).unwrap().data, "a");
    /// assert_eq!(input, b"data: b\n\ndata: c");
    /// assert_eq!(decoder.decode_next(&mut input).unwrap().data, "b");
    /// assert_eq!(decoder.decode_next(&mut input), None);
    /// assert!(input.is_empty());
    /// assert_eq!(decoder.finish().unwrap().data, "c");
    /// ```
    pub fn decode_next(&mut self, input: &mut &[u8]) -> Option<SseEvent> {
        if !self.bom_checked && !self.strip_bom(input) {
            return None;
        }
        loop {
            if self.after_cr && !input.is_empty() {
                self.after_cr = false;
                if input[0] == b'\n' {
                    *input = &input[1..];
                }
            }
            let Some(line_end) = memchr::memchr2(b'\n', b'\r', input) else {
                self.partial.extend_from_slice(input);
                *input = &[];
                return None;
            };
            let mut next = line_end + 1;
            if input[line_end] == b'\r' {
                match input.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let event = if self.partial.is_empty() {
                self.process_line(&input[..line_end])
            } else {
                self.partial.extend_from_slice(&input[..line_end]);
                let line = std::mem::take(&mut self.partial);
                let event = self.process_line(&line);
                // Keep the allocation for the next partial line.
                self.partial = line;
                self.partial.clear();
                event
            };
            *input = &input[next..];
            if event.is_some() {
                return event;
            }
        }
    }

    /// Drop a byte-order mark at the very start of the stream, which may itself be split across chunks: returns
    /// `false` (having kept `input`) while fewer than three bytes are known.
    fn strip_bom(&mut self, input: &mut &[u8]) -> bool {
        const BOM: &[u8] = b"\xEF\xBB\xBF";
        let known = self.partial.len();
        if known + input.len() < 3 {
            self.partial.extend_from_slice(input);
            *input = &[];
            return false;
        }
        self.bom_checked = true;
        let from_input = 3 - known;
        if self.partial[..] == BOM[..known] && input[..from_input] == BOM[known..] {
            self.partial.clear();
            *input = &input[from_input..];
        } else if known > 0 {
            // Fewer than three bytes at the start of a stream cannot complete an event: line them up as usual.
            let mut pending = &std::mem::take(&mut self.partial)[..];
            let none = self.decode_next(&mut pending);
            debug_assert!(none.is_none());
        }
        true
    }

    /// The stream ended: a final event whose blank line never came is dispatched (servers that close right
    /// after the last `data:` line are common); an unterminated last line is processed first.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            if let Some(event) = self.process_line(&line) {
                return Some(event);
            }
        }
        self.take_event()
    }

    /// Interpret one complete line; a blank line dispatches the event being built.
    fn process_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.take_event();
        }
        if line[0] == b':' {
            return None;
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
        None
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
    fn byte_order_mark_split_every_way_and_short_first_chunks_without_one() {
        for chunks in [
            &[&b"\xEF"[..], b"\xBB", b"\xBFdata: a\n\n"][..],
            &[b"\xEF\xBB", b"\xBFdata: a\n\n"],
            &[b"\xEF", b"\xBB\xBF", b"data: a\n\n"],
            &[b"\n", b"data: a\n\n"],
            &[b"\r", b"\ndata: a\n\n"],
            &[b":", b"x\ndata: a\n\n"],
            &[b"da", b"ta: a\n\n"],
            &[b"", b"d", b"", b"a", b"ta: a\n", b"\n"],
        ] {
            assert_eq!(data(&decode_chunks(chunks)), ["a"], "{chunks:?}");
        }
        // A byte-order mark is only stripped at the very start.
        assert_eq!(
            data(&decode_chunks(&[b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"])),
            ["a"]
        );
    }

    #[test]
    fn decoding_one_event_at_a_time_leaves_the_rest_of_the_input() {
        let mut decoder = SseDecoder::new();
        let mut input: &[u8] = b"data: a\r\n\r\n: note\r\ndata: b\r";
        assert_eq!(decoder.decode_next(&mut input).unwrap().data, "a");
        assert_eq!(input, b": note\r\ndata: b\r");
        assert_eq!(decoder.decode_next(&mut input), None);
        assert!(input.is_empty());
        // The CR that ended the last chunk and this LF are one line break; the blank line after it dispatches.
        let mut input: &[u8] = b"\n\ndata: c\n\n";
        assert_eq!(decoder.decode_next(&mut input).unwrap().data, "b");
        assert_eq!(decoder.decode_next(&mut input).unwrap().data, "c");
        assert_eq!(decoder.decode_next(&mut input), None);
    }

    #[test]
    fn a_final_event_without_its_blank_line_is_still_dispatched_at_the_end() {
        assert_eq!(data(&decode_chunks(&[b"data: a\n\ndata: b"])), ["a", "b"]);
        assert_eq!(data(&decode_chunks(&[b"data: a\n\ndata: b\n"])), ["a", "b"]);
    }

    proptest! {
        #[test]
        fn every_chunking_yields_the_same_events(cuts in proptest::collection::vec(0usize..200, 0..12), bom: bool) {
            let text = format!(
                "{}event: a\r\ndata: {{\"t\":\"héllo\"}}\r\n\r\n: c\n\ndata:x\ndata: y\n\ndata: [DONE]\r\r",
                if bom { "\u{FEFF}" } else { "" }
            );
            let text = text.as_bytes();
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
