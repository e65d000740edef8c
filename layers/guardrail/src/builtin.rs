//! The built-in finders: personal data, secrets, and the output length.
//!
//! | finder | matches | validated by | longest match (bytes) | bytes a match may hold |
//! |---|---|---|---|---|
//! | `email` | `local@domain.tld` | — | 280 | letters, digits, `._%+-@` |
//! | `phone` | `+` and 8–15 digits with separators; `(415) 555-0100` forms | digit count | 27 | digits, `+ .-()` |
//! | `card` | 13–19 digits, spaces or dashes between | Luhn | 37 | digits, space, `-` |
//! | `iban` | country, check digits, 11–30 letters/digits, spaces between | mod-97 | 63 | `A-Z`, digits, space |
//! | API keys | `sk-ant-…`, `sk-…`, `AKIA…`/`ASIA…`, `ghp_…` (and `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), `xox?-…`, `AIza…` | — | 266 | letters, digits, `_-` |
//! | `private_key` | a PEM `-----BEGIN … PRIVATE KEY-----` header | — | 48 | `A-Z`, space, `-` |
//! | `length` | the first character past the limit | — | 4 | any |
//!
//! On a stream a finder holds back at most its longest match, and only the trailing run of bytes it may hold: for
//! prose that is the last partial word (a phone or card finder holds back trailing digits and spaces; the
//! private-key header finder, whose matches hold spaces, up to 48 bytes of upper-case letters and spaces).

use std::sync::Arc;

use crate::pattern::{Kind, RegexFinder};
use crate::scan::{Exhausted, Finder, Found};

pub(crate) const EMAIL: &str =
    r"[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63}){0,2}\.[A-Za-z]{2,24}";
pub(crate) const PHONE: &str = r"(?:\+[1-9][0-9 .\-()]{6,24}[0-9]|(?:\([2-9][0-9]{2}\) ?|(?-u:\b)[2-9][0-9]{2}[ .\-])[0-9]{3}[ .\-][0-9]{4})(?-u:\b)";
pub(crate) const CARD: &str = r"(?-u:\b)[0-9](?:[ \-]?[0-9]){12,18}(?-u:\b)";
pub(crate) const IBAN: &str = r"(?-u:\b)[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}(?-u:\b)";
pub(crate) const API_KEY: &str = r"(?-u:\b)(?:sk-ant-[A-Za-z0-9_\-]{20,200}|sk-[A-Za-z0-9_\-]{20,200}|(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}|xox[abposr]-[A-Za-z0-9\-]{10,200}|AIza[0-9A-Za-z_\-]{35})(?-u:\b)";
pub(crate) const PRIVATE_KEY: &str = r"-----BEGIN (?:[A-Z]{2,10} ){0,2}PRIVATE KEY-----";

/// Emails, phone numbers, payment cards (Luhn) and IBANs (mod-97).
pub(crate) fn personal_data(check: &str) -> Vec<Arc<dyn Finder>> {
    vec![
        Arc::new(RegexFinder::builtin(check, EMAIL, Kind::Fixed("email"))),
        Arc::new(RegexFinder::builtin(check, PHONE, Kind::Fixed("phone")).validated(phone)),
        Arc::new(RegexFinder::builtin(check, CARD, Kind::Fixed("card")).validated(luhn)),
        Arc::new(RegexFinder::builtin(check, IBAN, Kind::Fixed("iban")).validated(iban)),
    ]
}

/// Common API keys and PEM private-key headers.
pub(crate) fn secrets(check: &str) -> Vec<Arc<dyn Finder>> {
    vec![
        Arc::new(RegexFinder::builtin(
            check,
            API_KEY,
            Kind::Classify(key_kind),
        )),
        Arc::new(RegexFinder::builtin(
            check,
            PRIVATE_KEY,
            Kind::Fixed("private_key"),
        )),
    ]
}

fn key_kind(key: &str) -> &'static str {
    if key.starts_with("sk-ant-") {
        "anthropic_key"
    } else if key.starts_with("sk-") {
        "openai_key"
    } else if key.starts_with("AKIA") || key.starts_with("ASIA") {
        "aws_access_key"
    } else if key.starts_with("gh") || key.starts_with("github_pat_") {
        "github_token"
    } else if key.starts_with("xox") {
        "slack_token"
    } else {
        "google_api_key"
    }
}

/// A phone number has 8 to 15 digits (E.164), or is a North American number written with separators (10).
fn phone(candidate: &str) -> Option<usize> {
    let digits = candidate.bytes().filter(u8::is_ascii_digit).count();
    (8..=15).contains(&digits).then_some(candidate.len())
}

/// The Luhn check of a card number's digits: two passes over the candidate, no allocation (a body of card-shaped
/// numbers examines one candidate per number).
pub(crate) fn luhn(candidate: &str) -> Option<usize> {
    let count = candidate.bytes().filter(u8::is_ascii_digit).count();
    if !(13..=19).contains(&count) {
        return None;
    }
    let sum: u32 = candidate
        .bytes()
        .rev()
        .filter(u8::is_ascii_digit)
        .map(|b| u32::from(b - b'0'))
        .enumerate()
        .map(|(i, d)| match (i % 2, d * 2) {
            (0, _) => d,
            (_, doubled) if doubled > 9 => doubled - 9,
            (_, doubled) => doubled,
        })
        .sum();
    sum.is_multiple_of(10).then_some(candidate.len())
}

/// The longest prefix of `candidate` that is an IBAN by ISO 13616's mod-97 check (15 to 34 letters and digits;
/// a match may run into a following upper-case word, which the check cuts off again).
///
/// One pass: the check moves the first four characters to the end, so the remainder of a prefix is the running
/// remainder of its characters after the fourth, shifted by the four's digit count and plus their remainder —
/// each prefix costs one step, not a pass of its own.
pub(crate) fn iban(candidate: &str) -> Option<usize> {
    // The first four characters: their remainder and 10^(their digit count), both mod 97.
    let (mut head, mut shift, mut count) = (0u32, 1u32, 0usize);
    let (mut rest, mut longest) = (0u32, None);
    for (at, c) in candidate.char_indices() {
        if c == ' ' {
            continue;
        }
        let value = c.to_digit(36)?;
        let scale = if value < 10 { 10 } else { 100 };
        count += 1;
        if count <= 4 {
            head = (head * scale + value) % 97;
            shift = shift * scale % 97;
            continue;
        }
        rest = (rest * scale + value) % 97;
        if (15..=34).contains(&count) && (rest * shift + head) % 97 == 1 {
            longest = Some(at + c.len_utf8());
        }
    }
    longest
}

/// The first character past a limit of bytes of the whole text.
#[derive(Debug)]
pub(crate) struct LengthFinder {
    pub(crate) max_bytes: usize,
}

impl Finder for LengthFinder {
    fn max_len(&self) -> usize {
        4
    }

    fn may_contain(&self, _byte: u8) -> bool {
        true
    }

    fn find(
        &self,
        haystack: &str,
        from: usize,
        base: usize,
        _allowance: &mut usize,
    ) -> Result<Option<Found>, Exhausted> {
        let Some(mut start) = self.max_bytes.checked_sub(base) else {
            return Ok(None);
        };
        while start < haystack.len() && !haystack.is_char_boundary(start) {
            start += 1;
        }
        if start < from || start >= haystack.len() {
            return Ok(None);
        }
        let len = haystack[start..].chars().next().map_or(1, char::len_utf8);
        Ok(Some(Found {
            start,
            end: start + len,
            kind: "length",
        }))
    }

    fn spans_segments(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(finders: &[Arc<dyn Finder>], text: &str) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        for finder in finders {
            let mut from = 0;
            let mut allowance = usize::MAX;
            while let Ok(Some(hit)) = finder.find(text, from, 0, &mut allowance) {
                found.push((hit.kind, text[hit.start..hit.end].to_owned()));
                from = hit.end;
            }
        }
        found
    }

    #[test]
    fn personal_data_is_found_and_validated() {
        let finders = personal_data("personal_data");
        let text = "Write to jane.doe@example.co.uk or call +44 20 7946 0958 / (415) 555-0100. \
                    Card 4111 1111 1111 1111, not 4111 1111 1111 1112. IBAN GB82 WEST 1234 5698 7654 32 AND \
                    not GB82 WEST 1234 5698 7654 33.";
        assert_eq!(
            kinds(&finders, text),
            vec![
                ("email", "jane.doe@example.co.uk".into()),
                ("phone", "+44 20 7946 0958".into()),
                ("phone", "(415) 555-0100".into()),
                ("card", "4111 1111 1111 1111".into()),
                ("iban", "GB82 WEST 1234 5698 7654 32".into()),
            ]
        );
    }

    #[test]
    fn secrets_are_named_by_their_format() {
        let text =
            "keys: sk-ant-api03-abcdefghijklmnopqrstuvwxyz sk-proj-ABCDEFGHIJKLMNOPQRSTUV123 \
                    AKIAIOSFODNN7EXAMPLE ghp_abcdefghijklmnopqrstuvwxyz0123456789 \
                    xoxb-1234567890-abcdefghij AIzaSyA-abcdefghijklmnopqrstuvwxyz12345 \
                    -----BEGIN RSA PRIVATE KEY----- and a task-management-system-for-everyone";
        let found: Vec<&str> = kinds(&secrets("secrets"), text)
            .into_iter()
            .map(|(kind, _)| kind)
            .collect();
        assert_eq!(
            found,
            vec![
                "anthropic_key",
                "openai_key",
                "aws_access_key",
                "github_token",
                "slack_token",
                "google_api_key",
                "private_key"
            ]
        );
    }

    #[test]
    fn check_digits_are_computed_as_the_standards_say() {
        assert_eq!(luhn("4242424242424242"), Some(16));
        assert_eq!(luhn("4242424242424241"), None);
        assert_eq!(iban("DE89370400440532013000"), Some(22));
        assert_eq!(iban("DE89 3704 0044 0532 0130 00"), Some(27));
        assert_eq!(iban("DE89 3704 0044 0532 0130 01"), None);
    }
}
