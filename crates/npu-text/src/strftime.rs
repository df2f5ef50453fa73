//! `strftime_now(format)` for chat templates (Llama 3's write today's date): the common
//! directives of Python's `strftime`, in UTC (no time-zone database is carried).

use minijinja::{Error, ErrorKind};
use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A civil date and time (UTC) from seconds since the epoch.
struct Civil {
    year: i64,
    month: u32,     // 1..=12
    day: u32,       // 1..=31
    weekday: usize, // 0 = Monday
    yday: u32,      // 1..=366
    hour: u64,
    minute: u64,
    second: u64,
}

fn civil(secs: u64) -> Civil {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Howard Hinnant's days_from_civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[month as usize - 1] + day + u32::from(leap && month > 2);
    Civil {
        year,
        month,
        day,
        weekday: (days + 3).rem_euclid(7) as usize, // 1970-01-01 was a Thursday
        yday,
        hour: rem / 3600,
        minute: rem % 3600 / 60,
        second: rem % 60,
    }
}

fn format(c: &Civil, fmt: &str) -> Result<String, Error> {
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(ch) = it.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        // glibc's `%-d` (no padding) is common in templates.
        let mut pad = true;
        let mut d = it.next();
        if d == Some('-') {
            pad = false;
            d = it.next();
        }
        let num = |n: u64, w: usize| {
            if pad {
                format!("{n:0w$}")
            } else {
                n.to_string()
            }
        };
        let h12 = match c.hour % 12 {
            0 => 12,
            h => h,
        };
        let s = match d {
            Some('Y') => c.year.to_string(),
            Some('y') => num(c.year.rem_euclid(100) as u64, 2),
            Some('m') => num(u64::from(c.month), 2),
            Some('d') => num(u64::from(c.day), 2),
            Some('e') => format!("{:>2}", c.day),
            Some('j') => num(u64::from(c.yday), 3),
            Some('H') => num(c.hour, 2),
            Some('I') => num(h12, 2),
            Some('M') => num(c.minute, 2),
            Some('S') => num(c.second, 2),
            Some('p') => (if c.hour < 12 { "AM" } else { "PM" }).to_string(),
            Some('B') => MONTHS[c.month as usize - 1].to_string(),
            Some('b') | Some('h') => MONTHS[c.month as usize - 1][..3].to_string(),
            Some('A') => DAYS[c.weekday].to_string(),
            Some('a') => DAYS[c.weekday][..3].to_string(),
            Some('%') => "%".to_string(),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: unsupported directive %{}",
                        other.map(String::from).unwrap_or_default()
                    ),
                ))
            }
        };
        out.push_str(&s);
    }
    Ok(out)
}

/// The current UTC time formatted with `fmt`.
pub fn now(fmt: &str) -> Result<String, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format(&civil(secs), fmt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_python() {
        // datetime.utcfromtimestamp(1732470000).strftime(...) == "24 Nov 2024 17:40:00 Sunday 329"
        let c = civil(1_732_470_000);
        assert_eq!(
            format(&c, "%d %b %Y %H:%M:%S %A %j").unwrap(),
            "24 Nov 2024 17:40:00 Sunday 329"
        );
        let c = civil(951_782_400); // 2000-02-29 00:00
        assert_eq!(
            format(&c, "%-d %B %y, %I %p %%").unwrap(),
            "29 February 00, 12 AM %"
        );
        assert!(format(&c, "%Q").is_err());
    }
}
