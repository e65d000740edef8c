//! Fixed windows: aligned multiples of a duration, UTC calendar days and UTC calendar months.

use std::sync::atomic::{AtomicU64, Ordering};

/// One window of a counter, in milliseconds since the epoch: `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First millisecond of the window; counters are keyed by it.
    pub start: u64,
    /// First millisecond after the window.
    pub end: u64,
}

const DAY_MS: u64 = 86_400_000;

/// The window of length `len_ms` (aligned to the epoch) that contains `now`.
pub(crate) fn fixed(now: u64, len_ms: u64) -> Window {
    let len = len_ms.max(1);
    let start = now - now % len;
    Window {
        start,
        end: start.saturating_add(len),
    }
}

/// The UTC calendar day that contains `now`.
pub(crate) fn day(now: u64) -> Window {
    fixed(now, DAY_MS)
}

/// The last month computed, as `first day << 32 | first day of the next month` (days since the epoch): the
/// calendar arithmetic runs once a month instead of on every call. One word, so a reader never pairs the start
/// of one month with the end of another; `0` (an empty range) until the first call.
static LAST_MONTH: AtomicU64 = AtomicU64::new(0);

/// The UTC calendar month that contains `now`.
pub(crate) fn month(now: u64) -> Window {
    let days = now / DAY_MS;
    let cached = LAST_MONTH.load(Ordering::Relaxed);
    let (start, end) = (cached >> 32, cached & u64::from(u32::MAX));
    if (start..end).contains(&days) {
        return Window {
            start: start * DAY_MS,
            end: end * DAY_MS,
        };
    }
    let (start, end) = month_days(days as i64);
    if let (Ok(s), Ok(e)) = (u32::try_from(start), u32::try_from(end)) {
        LAST_MONTH.store(u64::from(s) << 32 | u64::from(e), Ordering::Relaxed);
    }
    Window {
        start: start as u64 * DAY_MS,
        end: end as u64 * DAY_MS,
    }
}

/// The first day of the month containing `days` and the first day of the next month (days since the epoch).
fn month_days(days: i64) -> (i64, i64) {
    let (year, month, _) = civil_from_days(days);
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    (
        days_from_civil(year, month, 1),
        days_from_civil(next_year, next_month, 1),
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(year: i64, month: u32, day: u32) -> u64 {
        days_from_civil(year, month, day) as u64 * DAY_MS
    }

    #[test]
    fn calendar_round_trips_over_four_centuries() {
        for days in (0..146_097 * 2).step_by(7) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn months_have_their_calendar_lengths() {
        let feb_leap = month(ms(2024, 2, 10) + 5);
        assert_eq!(feb_leap.start, ms(2024, 2, 1));
        assert_eq!(feb_leap.end, ms(2024, 3, 1));
        assert_eq!((feb_leap.end - feb_leap.start) / DAY_MS, 29);
        let dec = month(ms(2026, 12, 31) + DAY_MS - 1);
        assert_eq!(dec.start, ms(2026, 12, 1));
        assert_eq!(dec.end, ms(2027, 1, 1));
        assert_eq!(month(ms(2027, 1, 1)).start, ms(2027, 1, 1));
    }

    #[test]
    fn the_cached_month_matches_the_calendar_in_any_order() {
        // Jumping back and forth between months must never answer from the wrong month's cache entry.
        let instants = [
            ms(2024, 2, 29) + 5,
            ms(2024, 3, 1),
            ms(2024, 2, 1),
            ms(2024, 3, 1) - 1,
            ms(1970, 1, 1),
            ms(2100, 12, 31),
            ms(2024, 2, 15),
        ];
        for at in instants {
            let days = (at / DAY_MS) as i64;
            let (start, end) = month_days(days);
            let expected = Window {
                start: start as u64 * DAY_MS,
                end: end as u64 * DAY_MS,
            };
            assert_eq!(month(at), expected, "at {at}");
            assert_eq!(month(at), expected, "at {at}, cached");
        }
    }

    #[test]
    fn fixed_windows_are_aligned() {
        let w = fixed(125_000, 60_000);
        assert_eq!(
            w,
            Window {
                start: 120_000,
                end: 180_000
            }
        );
        assert_eq!(day(DAY_MS * 3 + 5).start, DAY_MS * 3);
    }
}
