//! The guardrail's streaming scanner: never panics, and whatever the chunking of a text, the text it lets
//! through (redacted), its hits and its block equal those of scanning the whole text at once.
//!
//! Input: the first byte says how many of the next bytes are piece sizes (cycled; `size % 16 + 1` bytes, moved
//! to a character boundary, and an empty piece first when the high bit is set); the rest is the text.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tower_chat_guardrail::bench_support::{scan_whole, OutputScanner, Scanned};
use tower_chat_guardrail::Check;

/// Every kind of pattern check and action: block (secrets, the length), redact (personal data, a pattern),
/// flag (a deny-list). Compiled once.
static CHECKS: LazyLock<Vec<Check>> = LazyLock::new(|| {
    vec![
        Check::secrets(),
        Check::personal_data(),
        Check::deny_list("topics", ["project zeus", "red team"])
            .unwrap()
            .flag(),
        Check::pattern("ticket", r"TCK-[0-9]{4,8}").unwrap().redact(),
        Check::output_length(2048),
    ]
});

fn streamed(text: &str, sizes: &[u8]) -> Scanned {
    let mut scanner = OutputScanner::new(CHECKS.clone());
    let mut all = Scanned::default();
    let mut add = |step: Scanned| {
        all.text.push_str(&step.text);
        all.hits.extend(step.hits);
        if step.block.is_some() {
            assert!(all.block.is_none(), "a second block after {:?}", all.block);
            all.block = step.block;
        }
    };
    let mut rest = text;
    let mut size = sizes.iter().cycle();
    while !rest.is_empty() {
        let byte = size.next().copied().unwrap_or(u8::MAX);
        if byte & 0x80 != 0 {
            add(scanner.push_scanned(""));
        }
        let mut cut = (usize::from(byte % 16) + 1).min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        add(scanner.push_scanned(&rest[..cut]));
        rest = &rest[cut..];
    }
    add(scanner.finish_scanned());
    if all.block.is_none() {
        // Past a block the rest is dropped, not held.
        assert_eq!(scanner.held(), 0, "the end decides everything");
    }
    all
}

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let (sizes, text) = rest.split_at(usize::from(count % 8).min(rest.len()));
    let text = String::from_utf8_lossy(text);
    let whole = scan_whole(CHECKS.clone(), &text);
    let mut pieces = streamed(&text, sizes);
    let mut expected = whole.clone();
    pieces.hits.sort();
    expected.hits.sort();
    assert_eq!(pieces, expected, "sizes {sizes:?}");
    // One byte at a time is the hardest chunking.
    let mut bytewise = streamed(&text, &[0]);
    bytewise.hits.sort();
    assert_eq!(bytewise, expected, "byte by byte");
});
