//! The grammar of durations written as text: `"250ms"`, `"30s"`, `"5min"`,
//! `"1m30s"`, `"1h"`, `"1d"`.
//!
//! One parser for every place lockguard reads a duration: configuration read
//! with serde and quotas read from text (lockguard-core), and the options of
//! the attribute macros (lockguard-macros). So `"1m30s"` means the same in an
//! attribute and in a configuration file.

use std::fmt;
use std::time::Duration;

/// The units, with their length in ms; a unit that another one starts
/// with comes after it, so `ms` and `min` win over `m`, and `day` over `d`.
const UNITS: [(&str, u64); 7] = [
    ("ms", 1),
    ("min", 60_000),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("day", 86_400_000),
    ("d", 86_400_000),
];

/// What a well-formed duration looks like, for error messages.
pub const DURATION_HELP: &str = "a duration is a whole number and a unit (ms, s, m or min, h, d or day), \
     or several summed, like \"30s\", \"250ms\" or \"1m30s\"";

/// Reads one or more `<count><unit>` parts, summed: `"30s"`, `"1m30s"`.
///
/// # Errors
///
/// A message that quotes the text and says what is wrong: no unit, an
/// unknown unit, a fraction, a sign, spaces, a duration too long to count
/// in milliseconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err(format!("empty duration; {DURATION_HELP}"));
    }
    let mut total_ms: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!("invalid duration {text:?}; {DURATION_HELP}"));
        }
        let (count, after) = rest.split_at(digits);
        if after.starts_with('.') {
            return Err(format!(
                "duration {text:?} has a fraction; use a smaller unit, like \"1500ms\" for \"1.5s\""
            ));
        }
        let count: u64 = count
            .parse()
            .map_err(|_| format!("duration {text:?} is too long"))?;
        let Some(&(unit, ms)) = UNITS.iter().find(|(unit, _)| after.starts_with(unit)) else {
            let unit: String = after.chars().take_while(|c| !c.is_ascii_digit()).collect();
            return Err(if unit.is_empty() {
                format!("duration {text:?} has no unit; {DURATION_HELP}")
            } else {
                format!("unknown unit {unit:?} in duration {text:?}; {DURATION_HELP}")
            });
        };
        total_ms = count
            .checked_mul(ms)
            .and_then(|part| total_ms.checked_add(part))
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        rest = &after[unit.len()..];
    }
    Ok(Duration::from_millis(total_ms))
}

/// Reads the period of a rate (`"10/s"`, `"5/250ms"`): a unit alone is one
/// of it (`"s"`, `"min"`), anything else a duration.
///
/// # Errors
///
/// As [`parse`].
pub fn parse_period(text: &str) -> Result<Duration, String> {
    match UNITS.iter().find(|(unit, _)| *unit == text) {
        Some(&(_, ms)) => Ok(Duration::from_millis(ms)),
        None => parse(text),
    }
}

/// A duration as [`parse`] reads it back, in the largest unit that holds
/// it exactly (`"90s"`, `"5min"`, `"1d"`); a period (`bare_unit`) of one
/// unit is the unit alone (`"s"`, as in `"10/s"`). A duration that is not
/// a whole number of milliseconds is written in `us`, which the parser does
/// not read.
///
/// A plain value: both fields are all it is, so it is built with a struct
/// literal.
#[derive(Debug, Clone, Copy)]
pub struct Text {
    /// The duration written.
    pub duration: Duration,
    /// Whether a period of one unit is the unit alone (`"s"`, not `"1s"`).
    pub bare_unit: bool,
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.duration;
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            return write!(f, "{}us", d.as_micros());
        }
        let ms = d.as_millis();
        let (unit, len) = [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("min", 60_000),
            ("s", 1000),
        ]
        .into_iter()
        .find(|(_, len)| ms > 0 && ms.is_multiple_of(*len))
        .unwrap_or(("ms", 1));
        match ms / len {
            1 if self.bare_unit => f.write_str(unit),
            n => write!(f, "{n}{unit}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(duration: Duration) -> String {
        Text {
            duration,
            bare_unit: false,
        }
        .to_string()
    }

    #[test]
    fn parses_units_and_sums() {
        for (text, ms) in [
            ("250ms", 250),
            ("30s", 30_000),
            ("5m", 300_000),
            ("5min", 300_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("1day", 86_400_000),
            ("1m30s", 90_000),
            ("1s500ms", 1500),
            ("1h1min", 3_660_000),
            ("0s", 0),
        ] {
            assert_eq!(parse(text), Ok(Duration::from_millis(ms)), "{text}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "", "30", "s", "1.5s", "30 s", " 30s", "30sec", "-1s", "30x", "1m30", "10 s",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse("99999999999999999999s").is_err());
        assert!(parse(&format!("{}d", u64::MAX / 1000)).is_err());
        let e = parse("1.5s").unwrap_err();
        assert!(e.contains("1500ms"), "{e}");
        let e = parse("30x").unwrap_err();
        assert!(e.contains("unknown unit \"x\""), "{e}");
    }

    #[test]
    fn periods_take_bare_units() {
        assert_eq!(parse_period("s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_period("m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_period("min"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_period("ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_period("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_period("sec").is_err());
    }

    #[test]
    fn writes_what_it_reads() {
        for (written, ms) in [
            ("250ms", 250),
            ("30s", 30_000),
            ("90s", 90_000),
            ("5min", 300_000),
            ("2h", 7_200_000),
            ("1d", 86_400_000),
            ("0ms", 0),
        ] {
            let d = Duration::from_millis(ms);
            assert_eq!(text(d), written);
            assert_eq!(parse(written), Ok(d));
        }
        let period = |ms| Text {
            duration: Duration::from_millis(ms),
            bare_unit: true,
        };
        assert_eq!(period(1000).to_string(), "s");
        assert_eq!(period(60_000).to_string(), "min");
        assert_eq!(period(2000).to_string(), "2s");
        assert_eq!(text(Duration::from_micros(1500)), "1500us");
    }

    /// Every string of up to five characters over an alphabet of the
    /// tricky ones parses or is an error, never a panic, and what parses is
    /// written back as text that reads the same.
    #[test]
    fn no_input_panics_and_what_parses_round_trips() {
        let alphabet = ['1', '9', 'm', 's', 'h', 'd', '.', '/', 'µ'];
        let mut inputs = vec![String::new()];
        for _ in 0..5 {
            inputs = inputs
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            for i in &inputs {
                if let Ok(d) = parse(i) {
                    assert_eq!(parse(&text(d)), Ok(d), "{i:?}");
                }
                let _ = parse_period(i);
            }
        }
    }
}
