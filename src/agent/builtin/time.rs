//! `current_time`: the wall-clock time in an IANA time zone, for the built-in time tool.
//!
//! The instant is a parameter so callers (and tests) decide what "now" is.

use jiff::civil::Weekday;
use jiff::tz::{self, TimeZone, TimeZoneDatabase};
use jiff::Timestamp;
use serde_json::{json, Value};

/// Why the time could not be told.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimeError {
    /// The name is not in the time zone database.
    #[error("unknown time zone `{0}`; use an IANA name such as Europe/Paris")]
    UnknownTimeZone(String),
}

/// The wall-clock time at `now` in `timezone`, as a JSON object (date, time, offset, ...).
pub fn current_time(timezone: &str, now: Timestamp) -> Result<Value, TimeError> {
    let tz = lookup(timezone.trim())?;
    let zoned = now.to_zoned_datetime(tz.clone());
    let offset = zoned.offset().seconds();
    let sign = if offset < 0 { '-' } else { '+' };
    let utc_offset = format!(
        "{sign}{:02}:{:02}",
        offset.abs() / 3600,
        offset.abs() / 60 % 60
    );
    let (hour, minute, second) = (zoned.hour(), zoned.minute(), zoned.second());
    let date = zoned.date();
    Ok(json!({
        "timezone": tz.iana_name().unwrap_or("UTC"),
        "datetime": format!("{date}T{hour:02}:{minute:02}:{second:02}{utc_offset}"),
        "date": date.to_string(),
        "time": format!("{hour:02}:{minute:02}"),
        "weekday": weekday_name(zoned.weekday()),
        "utc_offset": utc_offset,
        "abbreviation": tz.to_offset_info(now).abbreviation(),
    }))
}

/// Finds a zone case-insensitively, in the system database first (it gets tz updates), then in
/// the bundled copy (for machines whose zoneinfo is missing or partial).
fn lookup(name: &str) -> Result<TimeZone, TimeError> {
    if name.eq_ignore_ascii_case("z") {
        return Ok(TimeZone::UTC);
    }
    let unknown = || TimeError::UnknownTimeZone(name.to_string());
    if name.is_empty() {
        return Err(unknown());
    }
    let tz = tz::db()
        .get(name)
        .or_else(|_| TimeZoneDatabase::bundled().get(name))
        .map_err(|_| unknown())?;
    // jiff maps `Etc/Unknown` to a placeholder zone; that is not an answer.
    if tz.is_unknown() {
        return Err(unknown());
    }
    Ok(tz)
}

fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "Monday",
        Weekday::Tuesday => "Tuesday",
        Weekday::Wednesday => "Wednesday",
        Weekday::Thursday => "Thursday",
        Weekday::Friday => "Friday",
        Weekday::Saturday => "Saturday",
        Weekday::Sunday => "Sunday",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-23T05:03:05Z, a Monday in northern winter.
    fn winter() -> Timestamp {
        "2026-11-23T05:03:05.750Z".parse().unwrap()
    }

    /// 2026-07-04T16:30:00Z, a Saturday in northern summer.
    fn summer() -> Timestamp {
        "2026-07-04T16:30:00Z".parse().unwrap()
    }

    #[test]
    fn tokyo() {
        let got = current_time("Asia/Tokyo", winter()).unwrap();
        assert_eq!(
            got,
            json!({
                "timezone": "Asia/Tokyo",
                "datetime": "2026-11-23T14:03:05+09:00",
                "date": "2026-11-23",
                "time": "14:03",
                "weekday": "Monday",
                "utc_offset": "+09:00",
                "abbreviation": "JST",
            })
        );
    }

    #[test]
    fn new_york_follows_daylight_saving() {
        let winter = current_time("America/New_York", winter()).unwrap();
        assert_eq!(winter["datetime"], "2026-11-23T00:03:05-05:00");
        assert_eq!(winter["utc_offset"], "-05:00");
        assert_eq!(winter["abbreviation"], "EST");
        let summer = current_time("America/New_York", summer()).unwrap();
        assert_eq!(summer["datetime"], "2026-07-04T12:30:00-04:00");
        assert_eq!(summer["weekday"], "Saturday");
        assert_eq!(summer["abbreviation"], "EDT");
    }

    #[test]
    fn utc_and_its_spellings() {
        for name in ["UTC", "utc", "Z", "z", "  UTC  "] {
            let got = current_time(name, winter()).unwrap();
            assert_eq!(got["timezone"], "UTC", "{name:?}");
            assert_eq!(got["datetime"], "2026-11-23T05:03:05+00:00");
            assert_eq!(got["utc_offset"], "+00:00");
            assert_eq!(got["abbreviation"], "UTC");
        }
        let gmt = current_time("GMT", winter()).unwrap();
        assert_eq!(gmt["time"], "05:03");
        assert_eq!(gmt["abbreviation"], "GMT");
    }

    #[test]
    fn fractional_offsets() {
        let got = current_time("Asia/Kolkata", winter()).unwrap();
        assert_eq!(got["datetime"], "2026-11-23T10:33:05+05:30");
        let got = current_time("America/St_Johns", summer()).unwrap();
        assert_eq!(got["utc_offset"], "-02:30");
    }

    #[test]
    fn names_are_case_insensitive() {
        let got = current_time(" asia/tokyo ", winter()).unwrap();
        assert_eq!(got["timezone"], "Asia/Tokyo");
        assert_eq!(got["time"], "14:03");
        let got = current_time("EUROPE/PARIS", summer()).unwrap();
        assert_eq!(got["timezone"], "Europe/Paris");
        assert_eq!(got["abbreviation"], "CEST");
    }

    #[test]
    fn unknown_zones() {
        for name in [
            "Mars",
            "",
            "   ",
            "Etc/Unknown",
            "../../etc/passwd",
            "Europe/",
        ] {
            assert_eq!(
                current_time(name, winter()),
                Err(TimeError::UnknownTimeZone(name.trim().to_string())),
                "{name:?}"
            );
        }
        assert_eq!(
            TimeError::UnknownTimeZone("Mars".into()).to_string(),
            "unknown time zone `Mars`; use an IANA name such as Europe/Paris"
        );
    }
}
