//! The spend page's period: a preset (today, the last 7 days, this or last ISO week — Monday first — this or
//! last calendar month) or `from`/`until` dates, as UTC days; a malformed or inverted one is refused, named.

use tower_chat_persistence::UtcDay;

/// The presets, as `?range=` names them, with their labels.
pub(crate) const PRESETS: [(&str, &str); 6] = [
    ("today", "Today"),
    ("7d", "Last 7 days"),
    ("this-week", "This week"),
    ("last-week", "Last week"),
    ("this-month", "This month"),
    ("last-month", "Last month"),
];

/// The preset shown when the query names none.
pub(crate) const DEFAULT_PRESET: &str = "this-month";

/// The longest period a page sums (ten years of days).
const MAX_DAYS: i64 = 3_660;

/// The days `[from, until)` of a page, and the preset that chose them (`None` for dates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Period {
    pub(crate) from: UtcDay,
    pub(crate) until: UtcDay,
    pub(crate) preset: Option<&'static str>,
}

impl Period {
    /// The period a query asks for, on `today`: `from`/`until` (both days included; `until` defaults to today)
    /// when given, else the preset `range`, else [`DEFAULT_PRESET`].
    pub(crate) fn parse(
        range: Option<&str>,
        from: Option<&str>,
        until: Option<&str>,
        today: UtcDay,
    ) -> Result<Period, String> {
        let from = from.filter(|s| !s.is_empty());
        let until = until.filter(|s| !s.is_empty());
        if from.is_none() && until.is_none() {
            return preset(range.unwrap_or(DEFAULT_PRESET), today);
        }
        let Some(from) = from else {
            return Err("`until` needs a `from` date (?from=2026-12-01&until=2026-12-07).".into());
        };
        let first = parse_date(from)?;
        let last = match until {
            Some(until) => parse_date(until)?,
            None => today,
        };
        if last < first {
            return Err(format!(
                "`until` ({}) is before `from` ({}).",
                date(last),
                date(first)
            ));
        }
        if last.days_since_epoch() - first.days_since_epoch() >= MAX_DAYS {
            return Err(format!(
                "A period is at most {MAX_DAYS} days; {} to {} is longer.",
                date(first),
                date(last)
            ));
        }
        Ok(Period {
            from: first,
            until: last.plus(1),
            preset: None,
        })
    }

    /// The last day of the period (included).
    pub(crate) fn last(&self) -> UtcDay {
        self.until.plus(-1)
    }
}

fn preset(name: &str, today: UtcDay) -> Result<Period, String> {
    let monday = today.plus(-iso_weekday(today));
    let month = month_start(today);
    let (from, until) = match name {
        "today" => (today, today.plus(1)),
        "7d" => (today.plus(-6), today.plus(1)),
        "this-week" => (monday, monday.plus(7)),
        "last-week" => (monday.plus(-7), monday),
        "this-month" => (month, next_month(month)),
        "last-month" => (month_start(month.plus(-1)), month),
        other => {
            let names: Vec<_> = PRESETS.iter().map(|(name, _)| *name).collect();
            return Err(format!(
                "Unknown range `{other}`: choose {} (?range=7d), or give dates (?from=2026-12-01&until=2026-12-07).",
                names.join(", ")
            ));
        }
    };
    let preset = PRESETS.iter().find(|(n, _)| *n == name).map(|(n, _)| *n);
    Ok(Period {
        from,
        until,
        preset,
    })
}

/// Monday 0 … Sunday 6 (1970-01-01 was a Thursday).
fn iso_weekday(day: UtcDay) -> i64 {
    (day.days_since_epoch() + 3).rem_euclid(7)
}

fn month_start(day: UtcDay) -> UtcDay {
    let (y, m, _) = civil_from_days(day.days_since_epoch());
    UtcDay::from_days_since_epoch(days_from_civil(y, m, 1))
}

fn next_month(first: UtcDay) -> UtcDay {
    let (y, m, _) = civil_from_days(first.days_since_epoch());
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    UtcDay::from_days_since_epoch(days_from_civil(y, m, 1))
}

/// `YYYY-MM-DD`.
pub(crate) fn date(day: UtcDay) -> String {
    let (y, m, d) = civil_from_days(day.days_since_epoch());
    format!("{y:04}-{m:02}-{d:02}")
}

/// A `YYYY-MM-DD` date that exists.
pub(crate) fn parse_date(text: &str) -> Result<UtcDay, String> {
    let bad = || format!("`{text}` is not a date: write it as YYYY-MM-DD (2026-12-01).");
    let mut parts = text.splitn(3, '-');
    let mut field = |len: usize| {
        parts
            .next()
            .filter(|p| p.len() == len && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<i64>().ok())
    };
    let (Some(y), Some(m), Some(d)) = (field(4), field(2), field(2)) else {
        return Err(bad());
    };
    if !(1..=12).contains(&m) || d < 1 || y < 1970 {
        return Err(bad());
    }
    let days = days_from_civil(y, m, d);
    // A day past the month's end (2026-02-30) lands in the next month.
    if civil_from_days(days) != (y, m, d) {
        return Err(bad());
    }
    Ok(UtcDay::from_days_since_epoch(days))
}

/// Howard Hinnant's `days_from_civil`: days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's `civil_from_days`: (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> UtcDay {
        parse_date(text).unwrap()
    }

    fn period(range: &str, today: &str) -> (String, String) {
        let p = Period::parse(Some(range), None, None, day(today)).unwrap();
        (date(p.from), date(p.last()))
    }

    #[test]
    fn presets_are_calendar_weeks_monday_first_and_calendar_months() {
        // 2026-12-07 is a Monday; 2026-12-13 a Sunday.
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(
            period("today", "2026-12-07"),
            pair("2026-12-07", "2026-12-07")
        );
        assert_eq!(period("7d", "2026-12-07"), pair("2026-12-01", "2026-12-07"));
        assert_eq!(
            period("this-week", "2026-12-07"),
            pair("2026-12-07", "2026-12-13")
        );
        assert_eq!(
            period("this-week", "2026-12-13"),
            pair("2026-12-07", "2026-12-13")
        );
        assert_eq!(
            period("last-week", "2026-12-13"),
            pair("2026-11-30", "2026-12-06")
        );
        assert_eq!(
            period("this-month", "2026-12-07"),
            pair("2026-12-01", "2026-12-31")
        );
        assert_eq!(
            period("last-month", "2026-12-07"),
            pair("2026-11-01", "2026-11-30")
        );
        assert_eq!(
            period("last-month", "2027-01-15"),
            pair("2026-12-01", "2026-12-31")
        );
        assert_eq!(
            period("this-month", "2028-02-10"),
            pair("2028-02-01", "2028-02-29")
        );
        // A week across a year's end: 2027-01-01 is a Friday.
        assert_eq!(
            period("this-week", "2027-01-01"),
            pair("2026-12-28", "2027-01-03")
        );
    }

    #[test]
    fn dates_include_both_ends_and_bad_ones_are_named() {
        let today = day("2026-12-07");
        let p = Period::parse(None, Some("2026-11-28"), Some("2026-12-02"), today).unwrap();
        assert_eq!(
            (date(p.from), date(p.until)),
            ("2026-11-28".into(), "2026-12-03".into())
        );
        assert_eq!(p.preset, None);
        let open = Period::parse(None, Some("2026-12-01"), None, today).unwrap();
        assert_eq!(open.last(), today);
        for (from, until, says) in [
            (Some("2026-02-30"), None, "not a date"),
            (Some("2026-1-05"), None, "not a date"),
            (Some("yesterday"), None, "not a date"),
            (Some("2026-12-05"), Some("2026-12-01"), "before"),
            (None, Some("2026-12-01"), "needs a `from`"),
            (Some("1990-01-01"), Some("2026-12-01"), "at most"),
        ] {
            let refused = Period::parse(None, from, until, today).unwrap_err();
            assert!(refused.contains(says), "{from:?} {until:?}: {refused}");
        }
        let unknown = Period::parse(Some("fortnight"), None, None, today).unwrap_err();
        assert!(unknown.contains("Unknown range `fortnight`"), "{unknown}");
    }
}
