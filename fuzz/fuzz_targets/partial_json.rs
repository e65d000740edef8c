//! `PartialJson`: never panics whatever it is fed; a document `serde_json` reads gives the same value however it
//! is cut into chunks (whole, every `n` characters for a fuzzer-chosen `n`, character by character).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tower_chat_structured_output::PartialJson;

/// The value `chunks` parse to, or `None` when the parser refuses them (or the document is unfinished).
fn parse<'a>(chunks: impl IntoIterator<Item = &'a str>) -> Option<Value> {
    let mut parser = PartialJson::new();
    for chunk in chunks {
        parser.push(chunk).ok()?;
        // The value so far is readable after every chunk.
        let _ = parser.value();
    }
    parser.finish().ok()?;
    parser.into_value()
}

/// `text` in pieces of `n` characters (cut only at character boundaries, as text deltas are).
fn pieces(text: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (count, (at, _)) in text.char_indices().enumerate() {
        if count > 0 && count % n == 0 {
            out.push(&text[start..at]);
            start = at;
        }
    }
    out.push(&text[start..]);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let n = usize::from(n % 16) + 1;
    let whole = parse([text.as_ref()]);
    let cut = parse(pieces(&text, n));
    let by_char = parse(pieces(&text, 1));
    if let Ok(expected) = serde_json::from_str::<Value>(&text) {
        assert_eq!(whole.as_ref(), Some(&expected), "whole: {text:?}");
        assert_eq!(cut.as_ref(), Some(&expected), "every {n} chars: {text:?}");
        assert_eq!(by_char.as_ref(), Some(&expected), "char by char: {text:?}");
    }
});
