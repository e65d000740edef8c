//! What the templates do not give: values written the way people read them (times, spans, latencies, dollars,
//! counts with their noun, finish reasons) and URL encoding for the links the pages build.
//!
//! Everything here returns plain text; the templates ([`maud`]) escape it where it lands.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use tower_chat::{Cost, FinishReason};

/// `YYYY-MM-DD HH:MM:SS` UTC.
pub(crate) fn utc(time: SystemTime) -> String {
    let secs = crate::operator::unix(time);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `3 s`, `4 min`, `2 h 5 min`, `3 d`.
pub(crate) fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Milliseconds, for latencies.
pub(crate) fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Dollars with enough digits for a cheap call.
pub(crate) fn dollars(cost: Cost) -> String {
    let usd = cost.as_usd();
    if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.6}")
    }
}

/// `1 call`, `3 calls`, `0 calls`: the count and its noun, singular only for one.
pub(crate) fn count(n: u64, singular: &str, plural: &str) -> String {
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// A finish reason as a person reads it ("tool calls", "content filter"), not its Rust name.
pub(crate) fn finish_label(reason: &FinishReason) -> String {
    match reason {
        FinishReason::Stop => "stop".into(),
        FinishReason::StopSequence(sequence) => format!("stop sequence {sequence:?}"),
        FinishReason::Length => "length".into(),
        FinishReason::ToolCalls => "tool calls".into(),
        FinishReason::ContentFilter => "content filter".into(),
        FinishReason::Recitation => "recitation".into(),
        FinishReason::MalformedFunctionCall => "malformed tool call".into(),
        FinishReason::AwaitingApproval => "awaiting approval".into(),
        FinishReason::MaxRounds => "tool round limit".into(),
        FinishReason::Other(other) => format!("other ({other})"),
    }
}

/// Percent-encode `text` for a URL query value or path segment (unreserved characters kept).
pub(crate) fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_spans_read_as_people_write_them() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_067_050);
        assert_eq!(utc(t), "2026-11-30 19:30:50");
        assert_eq!(utc(SystemTime::UNIX_EPOCH), "1970-01-01 00:00:00");
        assert_eq!(
            utc(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29 00:00:00"
        );
        assert_eq!(span(Duration::from_secs(59)), "59 s");
        assert_eq!(span(Duration::from_secs(3 * 3600 + 120)), "3 h 2 min");
        assert_eq!(millis(Duration::from_micros(2500)), "2.5 ms");
        assert_eq!(dollars(Cost::from_nanos(18_000)), "$0.000018");
    }

    #[test]
    fn counts_agree_with_their_number_and_reasons_read_as_words() {
        assert_eq!(count(1, "call", "calls"), "1 call");
        assert_eq!(count(0, "call", "calls"), "0 calls");
        assert_eq!(count(40, "model call", "model calls"), "40 model calls");
        assert_eq!(finish_label(&FinishReason::ToolCalls), "tool calls");
        assert_eq!(finish_label(&FinishReason::ContentFilter), "content filter");
        assert_eq!(finish_label(&FinishReason::Length), "length");
        assert_eq!(
            finish_label(&FinishReason::Other("SAFETY".into())),
            "other (SAFETY)"
        );
    }

    #[test]
    fn url_values_are_percent_encoded() {
        assert_eq!(
            url_encode("alice/c 1?&=#\"<"),
            "alice%2Fc%201%3F%26%3D%23%22%3C"
        );
        assert_eq!(url_encode("apr_0-9.~"), "apr_0-9.~");
    }
}
