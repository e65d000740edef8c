//! Regular expressions as [`Finder`]s: a user's patterns and deny-lists, and the built-in checks' patterns.
//!
//! The `regex` crate searches in linear time. What a stream must hold back is read off the pattern itself with
//! `regex-syntax` (the parser `regex` uses): the longest match in bytes, and the set of bytes a match may contain.
//! A pattern whose matches have no upper length (`+`, `*`, `{2,}`) is refused when the check is built: bound its
//! repetitions (`{1,64}`), so a stream knows how much it may have to hold back.

use std::fmt;

use regex::Regex;
use regex_syntax::hir::{Class, Hir, HirKind};
use tower_chat::{ChatError, ErrorKind};

use crate::scan::{Exhausted, Finder, Found};

/// Which candidates a finder keeps: the length of the valid prefix of a candidate, if any (Luhn, mod-97).
pub(crate) type Validate = fn(&str) -> Option<usize>;

/// A compiled pattern with its bounds.
pub(crate) struct RegexFinder {
    regex: Regex,
    max_len: usize,
    bytes: [bool; 256],
    kind: Kind,
    validate: Option<Validate>,
}

/// What a match is called in a verdict and a redaction label.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// The same name for every match; empty for the check's own name.
    Fixed(&'static str),
    /// Named by looking at the match.
    Classify(fn(&str) -> &'static str),
}

impl fmt::Debug for RegexFinder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegexFinder")
            .field("regex", &self.regex.as_str())
            .field("max_len", &self.max_len)
            .finish_non_exhaustive()
    }
}

impl RegexFinder {
    /// Compile `pattern` for the check `check`; refused when it can match empty text or text of any length.
    pub(crate) fn new(check: &str, pattern: &str, kind: Kind) -> Result<Self, ChatError> {
        let invalid = |why: String| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("guardrail check `{check}`: {why}"),
            )
        };
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(pattern)
            .map_err(|e| invalid(format!("the pattern does not parse: {e}")))?;
        let max_len = hir.properties().maximum_len().ok_or_else(|| {
            invalid(format!(
                "the pattern {pattern:?} matches text of any length; bound its repetitions ({{1,64}} rather \
                 than + or *) so that a stream knows how much text it may have to hold back"
            ))
        })?;
        if hir.properties().minimum_len() == Some(0) {
            return Err(invalid(format!(
                "the pattern {pattern:?} matches empty text"
            )));
        }
        let regex = Regex::new(pattern)
            .map_err(|e| invalid(format!("the pattern does not compile: {e}")))?;
        let mut bytes = [false; 256];
        admit(&hir, &mut bytes);
        Ok(RegexFinder {
            regex,
            max_len,
            bytes,
            kind,
            validate: None,
        })
    }

    /// Keep only candidates `validate` accepts (cut to the valid prefix it gives).
    pub(crate) fn validated(mut self, validate: Validate) -> Self {
        self.validate = Some(validate);
        self
    }

    /// The built-in patterns compile: a failure is a bug caught by every test.
    pub(crate) fn builtin(check: &str, pattern: &str, kind: Kind) -> Self {
        match RegexFinder::new(check, pattern, kind) {
            Ok(finder) => finder,
            Err(error) => unreachable!("built-in pattern: {error}"),
        }
    }
}

impl Finder for RegexFinder {
    fn max_len(&self) -> usize {
        self.max_len
    }

    fn may_contain(&self, byte: u8) -> bool {
        self.bytes[usize::from(byte)]
    }

    fn find(
        &self,
        haystack: &str,
        mut from: usize,
        _base: usize,
        allowance: &mut usize,
    ) -> Result<Option<Found>, Exhausted> {
        while from <= haystack.len() {
            let Some(candidate) = self.regex.find_at(haystack, from) else {
                return Ok(None);
            };
            // Each candidate costs a validation of up to `max_len` bytes; a text made of near-misses (IBAN-shaped
            // words that fail mod-97) has one every few bytes, so they are counted against the budget.
            if *allowance == 0 {
                return Err(Exhausted {
                    at: candidate.start(),
                });
            }
            *allowance -= 1;
            let len = match self.validate {
                None => Some(candidate.len()),
                Some(validate) => validate(candidate.as_str()),
            };
            if let Some(len) = len.filter(|&len| len > 0) {
                let end = candidate.start() + len;
                let text = &haystack[candidate.start()..end];
                let kind = match self.kind {
                    Kind::Fixed(kind) => kind,
                    Kind::Classify(classify) => classify(text),
                };
                return Ok(Some(Found {
                    start: candidate.start(),
                    end,
                    kind,
                }));
            }
            let Some(next) = haystack[candidate.start()..].chars().next() else {
                return Ok(None);
            };
            from = candidate.start() + next.len_utf8();
        }
        Ok(None)
    }
}

/// Mark every byte a match of `hir` may contain (any byte of a non-ASCII character: `0x80..=0xFF`).
fn admit(hir: &Hir, bytes: &mut [bool; 256]) {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(literal) => literal.0.iter().for_each(|&b| bytes[usize::from(b)] = true),
        HirKind::Class(Class::Unicode(class)) => {
            for range in class.ranges() {
                let (start, end) = (u32::from(range.start()), u32::from(range.end()));
                for b in start..=end.min(0x7f) {
                    bytes[b as usize] = true;
                }
                if end >= 0x80 {
                    bytes[0x80..].iter_mut().for_each(|b| *b = true);
                }
            }
        }
        HirKind::Class(Class::Bytes(class)) => {
            for range in class.ranges() {
                for b in range.start()..=range.end() {
                    bytes[usize::from(b)] = true;
                }
            }
        }
        HirKind::Repetition(repetition) => admit(&repetition.sub, bytes),
        HirKind::Capture(capture) => admit(&capture.sub, bytes),
        HirKind::Concat(all) | HirKind::Alternation(all) => {
            all.iter().for_each(|hir| admit(hir, bytes))
        }
    }
}

/// A deny-list as one pattern: the words and phrases, case-insensitive, each a whole word.
pub(crate) fn deny_list_pattern<I, W>(words: I) -> String
where
    I: IntoIterator<Item = W>,
    W: AsRef<str>,
{
    let alternatives: Vec<String> = words
        .into_iter()
        .map(|word| regex::escape(word.as_ref().trim()))
        .filter(|word| !word.is_empty())
        .collect();
    format!(r"(?i)\b(?:{})\b", alternatives.join("|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_read_off_the_pattern() {
        let finder = RegexFinder::new("t", r"ab[0-9]{1,3}", Kind::Fixed("")).unwrap();
        assert_eq!(finder.max_len(), 5);
        assert!(finder.may_contain(b'7') && finder.may_contain(b'a'));
        assert!(!finder.may_contain(b' ') && !finder.may_contain(b'c'));
        let words = RegexFinder::new(
            "t",
            &deny_list_pattern(["Zeus", "red team"]),
            Kind::Fixed(""),
        )
        .unwrap();
        assert!(words.may_contain(b'z') && words.may_contain(b' '));
    }

    #[test]
    fn unbounded_and_empty_patterns_are_refused_with_the_reason() {
        let error = RegexFinder::new("ids", r"id-[0-9]+", Kind::Fixed("")).unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::InvalidRequest);
        assert!(error.message().contains("any length"), "{error}");
        let error = RegexFinder::new("ids", r"[0-9]{0,3}", Kind::Fixed("")).unwrap_err();
        assert!(error.message().contains("empty"), "{error}");
        let error = RegexFinder::new("ids", r"(", Kind::Fixed("")).unwrap_err();
        assert!(error.message().contains("does not parse"), "{error}");
    }
}
