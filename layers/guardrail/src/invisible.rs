//! Characters that take no room on screen but split a match apart: `sk-proj-AB\u{200b}CD…` reads as a key and
//! matches no pattern. The checks remove them before matching — from a request's texts on a copy whose offsets
//! map back to the original (what goes on keeps them unless a redaction covers them), from an answer's text for
//! good (it goes on without them).
//!
//! Removed: zero-width space, non-joiner and joiner (U+200B–U+200D), word joiner (U+2060), the zero-width
//! no-break space / byte-order mark (U+FEFF), the soft hyphen (U+00AD) and the Mongolian vowel separator
//! (U+180E). Without the joiner, an emoji sequence in an answer shows as its parts. Not normalised: look-alike
//! letters from other scripts (Cyrillic `а` for Latin `a`), full-width forms, and text spelled out or encoded
//! (base64, spaces between characters) — a pattern matches the bytes as written.

use std::borrow::Cow;

/// Whether `c` is one of the characters removed before matching.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}' | '\u{180E}'
    )
}

/// Whether `text` may hold one: every such character's UTF-8 form starts with one of these bytes, so most texts
/// are cleared by one byte scan.
fn may_hold(text: &str) -> bool {
    text.bytes().any(|b| matches!(b, 0xC2 | 0xE1 | 0xE2 | 0xEF))
}

/// `text` without the invisible characters; borrowed when it has none.
pub(crate) fn strip(text: &str) -> Cow<'_, str> {
    if !may_hold(text) || !text.chars().any(is_invisible) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.chars().filter(|c| !is_invisible(*c)).collect())
}

/// A text without its invisible characters, and the way back to the original's offsets.
#[derive(Debug)]
pub(crate) struct Stripped<'a> {
    text: Cow<'a, str>,
    /// At each removal: the offset in the stripped text, and how many bytes were removed up to there.
    removed: Vec<(usize, usize)>,
}

impl<'a> Stripped<'a> {
    pub(crate) fn new(original: &'a str) -> Self {
        if !may_hold(original) || !original.chars().any(is_invisible) {
            return Stripped {
                text: Cow::Borrowed(original),
                removed: Vec::new(),
            };
        }
        let mut text = String::with_capacity(original.len());
        let mut removed = Vec::new();
        let mut total = 0;
        for c in original.chars() {
            if is_invisible(c) {
                total += c.len_utf8();
                match removed.last_mut() {
                    Some((at, so_far)) if *at == text.len() => *so_far = total,
                    _ => removed.push((text.len(), total)),
                }
            } else {
                text.push(c);
            }
        }
        Stripped {
            text: Cow::Owned(text),
            removed,
        }
    }

    /// The text to match.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Bytes removed before the stripped offset `at` (removals at `at` itself count when `inclusive`).
    fn shift(&self, at: usize, inclusive: bool) -> usize {
        let count = self
            .removed
            .partition_point(|(offset, _)| *offset < at || (inclusive && *offset == at));
        count.checked_sub(1).map_or(0, |i| self.removed[i].1)
    }

    /// The original offsets of a span of the stripped text: from its first character to the end of its last,
    /// the invisible characters inside it included, those around it not.
    pub(crate) fn original(&self, start: usize, end: usize) -> (usize, usize) {
        if self.removed.is_empty() {
            return (start, end);
        }
        let from = start + self.shift(start, true);
        let to = if end > start {
            end + self.shift(end, false)
        } else {
            from
        };
        (from, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_map_back_around_the_removed_characters() {
        let original = "a\u{200b}bc\u{2060}\u{feff}d e";
        let stripped = Stripped::new(original);
        assert_eq!(stripped.text(), "abcd e");
        // "bcd": from `b` (after the zero-width space) to the end of `d`, the joiners inside kept in the span.
        let (start, end) = stripped.original(1, 4);
        assert_eq!(&original[start..end], "bc\u{2060}\u{feff}d");
        assert_eq!(stripped.original(0, 1), (0, 1));
        assert_eq!(strip("plain"), "plain");
        assert_eq!(strip("x\u{ad}y"), "xy");
    }
}
