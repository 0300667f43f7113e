//! Durations as configuration files write them: `"250ms"`, `"30s"`,
//! `"5min"`, `"1h"`, `"1d"`.

use std::fmt;
use std::time::Duration;

/// The units a duration may be written in, with their length in ms; the
/// first of each length is the one written.
const UNITS: [(&str, u64); 7] = [
    ("ms", 1),
    ("s", 1000),
    ("min", 60_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
    ("day", 86_400_000),
];

/// Reads a count and a unit (`"250ms"`, `"30s"`); with `bare_unit`, a unit
/// alone is a count of one (`"s"`, `"min"`, as in a rate `"10/s"`).
pub(crate) fn parse_duration(text: &str, bare_unit: bool) -> Option<Duration> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let (_, ms) = UNITS.iter().find(|(u, _)| *u == unit)?;
    let n: u64 = match number {
        "" if bare_unit => 1,
        "" => return None,
        n => n.parse().ok()?,
    };
    n.checked_mul(*ms).map(Duration::from_millis)
}

/// Writes `d` in the largest unit that holds it exactly (`"90s"`,
/// `"5min"`); with `bare_unit`, a count of one is the unit alone (`"s"`).
/// Durations that are not whole milliseconds are written in `us`.
pub(crate) fn write_duration(
    f: &mut fmt::Formatter<'_>,
    d: Duration,
    bare_unit: bool,
) -> fmt::Result {
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
        1 if bare_unit => f.write_str(unit),
        n => write!(f, "{n}{unit}"),
    }
}

/// Serde for a `Duration` written as text (`"250ms"`, `"30s"`, `"5min"`,
/// `"1h"`, `"1d"`), for configuration structs:
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use std::time::Duration;
///
/// #[derive(serde::Deserialize)]
/// struct Settings {
///     #[serde(with = "lockguard_core::serde_duration")]
///     wait: Duration,
/// }
/// let s: Settings = serde_json::from_str(r#"{ "wait": "250ms" }"#).unwrap();
/// assert_eq!(s.wait, Duration::from_millis(250));
/// # }
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod serde_duration {
    use std::time::Duration;

    /// Writes the duration as text; a duration that is not a whole number
    /// of milliseconds is an error.
    ///
    /// # Errors
    ///
    /// The serializer's, or one for a sub-millisecond remainder.
    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(serde::ser::Error::custom(format!(
                "duration {d:?} is not a whole number of milliseconds"
            )));
        }
        s.collect_str(&Text(*d))
    }

    /// Reads a duration written as text.
    ///
    /// # Errors
    ///
    /// One quoting the text when it is not a count and a unit.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        super::parse_duration(text.trim(), false).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid duration {text:?}: write a count and a unit, like \"250ms\", \"30s\", \"5min\", \"1h\" or \"1d\""
            ))
        })
    }

    use serde::Deserialize as _;

    /// A duration that displays as text.
    pub(super) struct Text(pub(super) Duration);

    impl std::fmt::Display for Text {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            super::write_duration(f, self.0, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Show(Duration, bool);

    impl fmt::Display for Show {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write_duration(f, self.0, self.1)
        }
    }

    #[test]
    fn durations_round_trip() {
        for (text, d) in [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("90s", Duration::from_secs(90)),
            ("5min", Duration::from_secs(300)),
            ("2h", Duration::from_secs(7200)),
            ("1d", Duration::from_secs(86_400)),
            ("0ms", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text, false), Some(d), "{text}");
            assert_eq!(Show(d, false).to_string(), text);
        }
        assert_eq!(Show(Duration::from_secs(1), true).to_string(), "s");
        assert_eq!(parse_duration("min", true), Some(Duration::from_secs(60)));
        for bad in [
            "",
            "s",
            "10",
            "1.5s",
            "10 s",
            "-1s",
            "99999999999999999999d",
        ] {
            assert_eq!(parse_duration(bad, false), None, "{bad:?}");
        }
    }

    /// Quotas, leases, algorithms and durations read from and written to
    /// configuration text, with errors that quote what was wrong.
    #[cfg(feature = "serde")]
    #[test]
    fn configuration_reads_and_writes_as_text() {
        use crate::{Algorithm, Lease, Quota};

        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Policy {
            quota: Quota,
            algorithm: Algorithm,
            lease: Lease,
            #[serde(with = "crate::serde_duration")]
            wait: Duration,
        }
        let text = r#"{"quota":"100/min burst 20","algorithm":"sliding_window","lease":{"watchdog":"30s"},"wait":"250ms"}"#;
        let policy: Policy = serde_json::from_str(text).unwrap();
        assert_eq!(
            policy,
            Policy {
                quota: Quota::per_minute(100).burst(20),
                algorithm: Algorithm::SlidingWindow,
                lease: Lease::Watchdog(Duration::from_secs(30)),
                wait: Duration::from_millis(250),
            }
        );
        assert_eq!(serde_json::to_string(&policy).unwrap(), text);
        let fixed: Lease = serde_json::from_str(r#"{"fixed":"10s"}"#).unwrap();
        assert_eq!(fixed, Lease::Fixed(Duration::from_secs(10)));
        for q in ["10/s", "5/250ms", "1/d", "3/2s", "1000/h burst 5"] {
            let quota: Quota = serde_json::from_str(&format!("{q:?}")).unwrap();
            assert_eq!(serde_json::to_string(&quota).unwrap(), format!("{q:?}"));
        }

        let err = |json: &str| {
            serde_json::from_str::<Policy>(json)
                .unwrap_err()
                .to_string()
        };
        let bad_quota =
            err(r#"{"quota":"10 per s","algorithm":"gcra","lease":{"fixed":"1s"},"wait":"1s"}"#);
        assert!(
            bad_quota.contains("10 per s") && bad_quota.contains("like"),
            "{bad_quota}"
        );
        let zero = err(r#"{"quota":"0/s","algorithm":"gcra","lease":{"fixed":"1s"},"wait":"1s"}"#);
        assert!(zero.contains("invalid input"), "{zero}");
        let bad_wait =
            err(r#"{"quota":"1/s","algorithm":"gcra","lease":{"fixed":"1s"},"wait":"1.5s"}"#);
        assert!(bad_wait.contains("\"1.5s\""), "{bad_wait}");
        let bad_algorithm =
            err(r#"{"quota":"1/s","algorithm":"leaky","lease":{"fixed":"1s"},"wait":"1s"}"#);
        assert!(bad_algorithm.contains("leaky"), "{bad_algorithm}");
        // A period finer than milliseconds cannot be written as text.
        assert!(serde_json::to_string(&Quota::new(1, Duration::from_micros(1500))).is_err());
    }
}
