//! Number formatting shared by the components (and identical on server and
//! client, so hydration finds the text it expects).

/// `12.5` → `12.5`, `12.0` → `12`, `9.375` → `9.38`.
/// Integer arithmetic, not `{:.2}`: float formatting would add about 30 KB
/// to the browser bundle.
pub fn num(x: f64) -> String {
    let hundredths = (x * 100.0).round() as i64;
    let sign = if hundredths < 0 { "-" } else { "" };
    let n = hundredths.unsigned_abs();
    let (whole, frac) = (n / 100, n % 100);
    match frac {
        0 => format!("{sign}{whole}"),
        f if f % 10 == 0 => format!("{sign}{whole}.{}", f / 10),
        f => format!("{sign}{whole}.{f:02}"),
    }
}

/// A percentage for a bar's width, clamped to 0–100.
pub fn width(percent: f64) -> String {
    format!("width: {}%", num(percent.clamp(0.0, 100.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_trailing_zeros() {
        assert_eq!(num(12.5), "12.5");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(9.375), "9.38");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(-1.5), "-1.5");
        assert_eq!(num(0.05), "0.05");
        assert_eq!(num(99.999), "100");
        assert_eq!(width(180.0), "width: 100%");
    }

    #[test]
    fn utc_times_read_back() {
        for ms in [0, 1_764_756_902_000, 951_782_400_000, 4_107_542_399_000] {
            let shown = utc(ms).replace(' ', "T") + "Z";
            assert_eq!(parse_utc(&shown), Some(ms), "{shown}");
        }
        assert_eq!(parse_utc("1970-01-02"), Some(86_400_000));
        for bad in [
            "",
            "2026-13-01",
            "2026-12-06T24:00:00Z",
            "26-12-06",
            "yesterday",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}

/// `2026-12-03 10:15:02` (UTC) from unix milliseconds.
pub fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
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
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Unix milliseconds from `2026-12-03T10:15:02Z` (or with a space, or a
/// date alone for its midnight), UTC; `None` for anything else.
pub fn parse_utc(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches('Z');
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((d, t)) => (d, t),
        None => (text, "00:00:00"),
    };
    let number = |s: &str, digits: usize| -> Option<i64> {
        (s.len() == digits && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let mut d = date.split('-');
    let (year, month, day) = (
        number(d.next()?, 4)?,
        number(d.next()?, 2)?,
        number(d.next()?, 2)?,
    );
    let mut t = time.split(':');
    let (hour, minute, second) = (
        number(t.next()?, 2)?,
        number(t.next()?, 2)?,
        number(t.next().unwrap_or("00"), 2)?,
    );
    if d.next().is_some()
        || t.next().is_some()
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    // Days since 1970-01-01 from a civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000)
}

/// How long ago, coarsely: `just now`, `5 min ago`, `3 h ago`, `12 days ago`.
pub fn age(ms: i64) -> String {
    let mins = ms.max(0) / 60_000;
    match mins {
        0 => "just now".to_string(),
        1..60 => format!("{mins} min ago"),
        60..2880 => format!("{} h ago", mins / 60),
        _ => format!("{} days ago", mins / 1440),
    }
}

/// `4.2s`, `1m 23s`, `2h 5m`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 60_000 {
        let tenths = (ms + 50) / 100;
        format!("{}.{}s", tenths / 10, tenths % 10)
    } else if ms < 3_600_000 {
        format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000)
    } else {
        format!("{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000)
    }
}

#[cfg(test)]
mod time_tests {
    use super::*;

    #[test]
    fn dates_and_durations() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_796_290_397_159), "2026-12-03 09:33:17");
        assert_eq!(duration(4_200), "4.2s");
        assert_eq!(age(59_999), "just now");
        assert_eq!(age(5 * 60_000), "5 min ago");
        assert_eq!(age(47 * 3_600_000 + 59 * 60_000), "47 h ago");
        assert_eq!(age(12 * 86_400_000), "12 days ago");
        assert_eq!(duration(59_960), "60.0s");
        assert_eq!(duration(0), "0.0s");
        assert_eq!(duration(83_000), "1m 23s");
        assert_eq!(duration(7_500_000), "2h 5m");
    }
}
