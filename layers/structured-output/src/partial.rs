//! [`PartialJson`]: a JSON value read chunk by chunk, readable as it grows.
//!
//! A streamed answer arrives as text deltas; after each one the caller wants the object so far: a property
//! appears once its value starts, a string grows with its text, a number or `true`/`false`/`null` appears when it
//! is complete, an array gains an element per value. The parser keeps that value in place and extends it with
//! each chunk, so reading it costs nothing and the total work is linear in the answer's length (navigation to the
//! value being extended is per token and per chunk, bounded by the nesting depth).
//!
//! Written here because no crate gives that: `serde_json` reads complete values only (its `StreamDeserializer`
//! reads a sequence of them), and the partial-JSON readers (`jiter`'s `partial_mode`, `tool-parser`'s
//! `PartialJson::parse_value(&self, input)`, `partial-json`-style "repair and parse" helpers) are stateless: they
//! take the whole prefix again at every chunk, which is quadratic in the answer's length over a
//! stream (the `partial` benchmark measures both).
//!
//! ```
//! use serde_json::json;
//! use tower_chat_structured_output::PartialJson;
//!
//! let mut parser = PartialJson::new();
//! parser.push(r#"{"city": "Os"#).unwrap();
//! assert_eq!(parser.value(), Some(&json!({"city": "Os"})));
//! let changes = parser.changes();
//! parser.push(r#"lo", "population": 7"#).unwrap();
//! assert!(parser.changes() > changes);
//! // The number may go on (`709 000`): it appears when it ends.
//! assert_eq!(parser.value(), Some(&json!({"city": "Oslo"})));
//! // Digits of the same number, not yet ended: the value did not change.
//! let changes = parser.changes();
//! parser.push("09").unwrap();
//! assert_eq!(parser.changes(), changes);
//! parser.push(r#"000, "tags": ["capital""#).unwrap();
//! assert_eq!(parser.value(), Some(&json!({"city": "Oslo", "population": 709000, "tags": ["capital"]})));
//! parser.push("]}").unwrap();
//! assert!(parser.is_complete());
//! assert!(parser.push("{").is_err());
//! ```

use std::fmt;

use serde_json::{Map, Number, Value};

/// Text that is not the beginning of a JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialJsonError {
    offset: usize,
    reason: &'static str,
}

impl PartialJsonError {
    /// The byte offset in the whole text (all chunks so far) where it went wrong.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

impl fmt::Display for PartialJsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not JSON at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for PartialJsonError {}

/// An open container: where its current child is.
#[derive(Clone, Debug)]
enum Frame {
    /// An object; the key of the value being read (set once its key is read).
    Object(Option<String>),
    /// An array; its current child is its last element.
    Array,
}

/// What the next byte may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// A value (at the top, after `:`, or after `,` in an array).
    Value,
    /// A value or `]` (right after `[`).
    ValueOrEnd,
    /// A key or `}` (right after `{`).
    KeyOrEnd,
    /// A key (after `,` in an object).
    Key,
    /// `:` after a key.
    Colon,
    /// `,` or the end of the open container.
    Next,
    /// Inside a string (`key`: an object key, else a value).
    Str { key: bool },
    /// After a backslash in a string.
    Escape { key: bool },
    /// Inside `\uXXXX`: the digits read so far and their value.
    Unicode { key: bool, digits: u8, code: u32 },
    /// A number or a literal, read into `scalar`.
    Scalar,
    /// The top value is complete: only whitespace may follow.
    Done,
}

/// A JSON value read incrementally (see the module docs).
#[derive(Clone, Debug)]
pub struct PartialJson {
    root: Option<Value>,
    frames: Vec<Frame>,
    expect: Expect,
    /// The number or literal being read.
    scalar: String,
    /// The key being read.
    key: String,
    /// String text read in this chunk and not yet appended to the value (one append per chunk, not per byte).
    pending: String,
    /// A high surrogate waiting for its low half.
    high_surrogate: Option<u32>,
    /// Bytes read so far, for error offsets.
    offset: usize,
    /// The error that spent the parser.
    failed: Option<PartialJsonError>,
    /// How many times the value changed (see [`PartialJson::changes`]).
    changes: u64,
}

impl Default for PartialJson {
    fn default() -> Self {
        PartialJson::new()
    }
}

impl PartialJson {
    /// A parser that has read nothing.
    pub fn new() -> Self {
        PartialJson {
            root: None,
            frames: Vec::new(),
            expect: Expect::Value,
            scalar: String::new(),
            key: String::new(),
            pending: String::new(),
            high_surrogate: None,
            offset: 0,
            failed: None,
            changes: 0,
        }
    }

    /// The value so far (`None` until its first byte).
    pub fn value(&self) -> Option<&Value> {
        self.root.as_ref()
    }

    /// The value so far, taken out of the parser.
    pub fn into_value(self) -> Option<Value> {
        self.root
    }

    /// How many times the value changed so far: a value put in place, or string text appended (once per chunk
    /// and string). A chunk that left this count as it was (whitespace, a key, the digits of a number not yet
    /// ended) left the value as it was, so a reader can skip it.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether the top value is complete.
    pub fn is_complete(&self) -> bool {
        self.expect == Expect::Done
    }

    /// Read the next chunk. After an error the parser is spent: every later call fails the same way.
    pub fn push(&mut self, chunk: &str) -> Result<(), PartialJsonError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let bytes = chunk.as_bytes();
        let mut i = 0;
        // Start of the current run of plain string text within `chunk`.
        let mut run = None;
        while i < bytes.len() {
            let b = bytes[i];
            match self.expect {
                Expect::Str { key } => match b {
                    b'"' | b'\\' => {
                        if let Some(start) = run.take() {
                            self.string_text(key, &chunk[start..i]);
                        }
                        if b == b'"' {
                            self.end_string(key);
                        } else {
                            self.expect = Expect::Escape { key };
                        }
                    }
                    0..=0x1f => return self.fail(i, "a control character in a string"),
                    _ => {
                        run.get_or_insert(i);
                    }
                },
                Expect::Escape { key } => {
                    let c = match b {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            self.expect = Expect::Unicode {
                                key,
                                digits: 0,
                                code: 0,
                            };
                            i += 1;
                            continue;
                        }
                        _ => return self.fail(i, "an unknown escape"),
                    };
                    self.push_char(key, c);
                    self.expect = Expect::Str { key };
                }
                Expect::Unicode { key, digits, code } => {
                    let Some(digit) = (b as char).to_digit(16) else {
                        return self.fail(i, "a \\u escape without four hex digits");
                    };
                    let code = code * 16 + digit;
                    if digits < 3 {
                        self.expect = Expect::Unicode {
                            key,
                            digits: digits + 1,
                            code,
                        };
                    } else {
                        self.expect = Expect::Str { key };
                        self.unicode(key, code, i)?;
                    }
                }
                Expect::Scalar => {
                    if matches!(b, b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'+' | b'-' | b'.') {
                        self.scalar.push(b as char);
                    } else {
                        self.end_scalar(i)?;
                        // The byte that ended the scalar is read again as what follows it.
                        continue;
                    }
                }
                _ if b.is_ascii_whitespace() => {}
                Expect::Value | Expect::ValueOrEnd => match b {
                    b'{' => {
                        self.insert(Value::Object(Map::new()));
                        self.frames.push(Frame::Object(None));
                        self.expect = Expect::KeyOrEnd;
                    }
                    b'[' => {
                        self.insert(Value::Array(Vec::new()));
                        self.frames.push(Frame::Array);
                        self.expect = Expect::ValueOrEnd;
                    }
                    b'"' => {
                        self.insert(Value::String(String::new()));
                        self.expect = Expect::Str { key: false };
                    }
                    b']' if self.expect == Expect::ValueOrEnd => self.close(),
                    b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                        self.scalar.clear();
                        self.scalar.push(b as char);
                        self.expect = Expect::Scalar;
                    }
                    _ => return self.fail(i, "expected a value"),
                },
                Expect::KeyOrEnd | Expect::Key => match b {
                    b'"' => {
                        self.key.clear();
                        self.expect = Expect::Str { key: true };
                    }
                    b'}' if self.expect == Expect::KeyOrEnd => self.close(),
                    _ => return self.fail(i, "expected a key"),
                },
                Expect::Colon => match b {
                    b':' => self.expect = Expect::Value,
                    _ => return self.fail(i, "expected `:`"),
                },
                Expect::Next => match (b, self.frames.last()) {
                    (b',', Some(Frame::Object(_))) => self.expect = Expect::Key,
                    (b',', Some(Frame::Array)) => self.expect = Expect::Value,
                    (b'}', Some(Frame::Object(_))) | (b']', Some(Frame::Array)) => self.close(),
                    _ => return self.fail(i, "expected `,` or the end of the container"),
                },
                Expect::Done => return self.fail(i, "text after the end of the value"),
            }
            i += 1;
        }
        if let (Some(start), Expect::Str { key }) = (run, self.expect) {
            self.string_text(key, &chunk[start..]);
        }
        self.flush();
        self.offset += bytes.len();
        Ok(())
    }

    /// Complete a number at the very end of the text (a top-level `42` has no byte after it to end it).
    pub fn finish(&mut self) -> Result<(), PartialJsonError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        if self.expect == Expect::Scalar && self.frames.is_empty() {
            self.end_scalar(0)?;
        }
        if self.is_complete() {
            Ok(())
        } else {
            Err(PartialJsonError {
                offset: self.offset,
                reason: "the text ended before the value",
            })
        }
    }

    fn fail(&mut self, i: usize, reason: &'static str) -> Result<(), PartialJsonError> {
        let error = PartialJsonError {
            offset: self.offset + i,
            reason,
        };
        self.failed = Some(error.clone());
        Err(error)
    }

    fn string_text(&mut self, key: bool, text: &str) {
        if key {
            self.key.push_str(text);
        } else {
            self.pending.push_str(text);
        }
    }

    fn push_char(&mut self, key: bool, c: char) {
        if key {
            self.key.push(c);
        } else {
            self.pending.push(c);
        }
    }

    fn unicode(&mut self, key: bool, code: u32, i: usize) -> Result<(), PartialJsonError> {
        let c = match (self.high_surrogate.take(), code) {
            (None, 0xD800..=0xDBFF) => {
                self.high_surrogate = Some(code);
                return Ok(());
            }
            (Some(high), 0xDC00..=0xDFFF) => {
                char::from_u32(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00))
            }
            (Some(_), _) => None,
            (None, 0xDC00..=0xDFFF) => None,
            (None, code) => char::from_u32(code),
        };
        match c {
            Some(c) => {
                self.push_char(key, c);
                Ok(())
            }
            None => self.fail(i, "an unpaired surrogate in a \\u escape"),
        }
    }

    fn end_string(&mut self, key: bool) {
        if key {
            if let Some(Frame::Object(slot)) = self.frames.last_mut() {
                *slot = Some(std::mem::take(&mut self.key));
            }
            self.expect = Expect::Colon;
        } else {
            self.flush();
            self.after_value();
        }
    }

    fn end_scalar(&mut self, i: usize) -> Result<(), PartialJsonError> {
        let value = match self.scalar.as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            number => match serde_json::from_str::<Number>(number) {
                Ok(number) => Value::Number(number),
                Err(_) => return self.fail(i, "not a number or literal"),
            },
        };
        self.insert(value);
        self.after_value();
        Ok(())
    }

    fn after_value(&mut self) {
        self.expect = if self.frames.is_empty() {
            Expect::Done
        } else {
            Expect::Next
        };
    }

    fn close(&mut self) {
        self.frames.pop();
        self.after_value();
    }

    /// Appends the string text read so far to the string value being read.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if let Some(Value::String(s)) = current(&mut self.root, &self.frames) {
            s.push_str(&self.pending);
            self.changes += 1;
        }
        self.pending.clear();
    }

    /// Puts a new value where the next value goes: the root, the open array's end, or the open object's key.
    fn insert(&mut self, value: Value) {
        self.changes += 1;
        let Some(frame) = self.frames.last() else {
            self.root = Some(value);
            return;
        };
        let frame = frame.clone();
        let mut node = self.root.as_mut().expect("a frame means a root");
        for outer in &self.frames[..self.frames.len() - 1] {
            node = child(node, outer).expect("frames follow the value");
        }
        match (node, frame) {
            (Value::Object(map), Frame::Object(Some(key))) => {
                map.insert(key, value);
            }
            (Value::Array(items), Frame::Array) => items.push(value),
            _ => unreachable!("a value is read only where its container expects one"),
        }
    }
}

/// The value the innermost frame points at (the root when no container is open).
fn current<'a>(root: &'a mut Option<Value>, frames: &[Frame]) -> Option<&'a mut Value> {
    let mut node = root.as_mut()?;
    for frame in frames {
        node = child(node, frame)?;
    }
    Some(node)
}

fn child<'a>(node: &'a mut Value, frame: &Frame) -> Option<&'a mut Value> {
    match (node, frame) {
        (Value::Object(map), Frame::Object(Some(key))) => map.get_mut(key),
        (Value::Array(items), Frame::Array) => items.last_mut(),
        _ => None,
    }
}
