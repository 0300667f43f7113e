//! Durations as configuration files write them, read and written with the
//! one grammar of [`crate::duration`]: `"250ms"`, `"30s"`, `"5min"`,
//! `"1m30s"`, `"1h"`, `"1d"`.

/// Serde for a `Duration` written as text (`"250ms"`, `"30s"`, `"5min"`,
/// `"1m30s"`, `"1h"`, `"1d"`; the grammar the attribute macros read too),
/// for configuration structs:
///
/// ```
/// use std::time::Duration;
///
/// #[derive(serde::Deserialize)]
/// struct Settings {
///     #[serde(with = "lockguard_core::serde_duration")]
///     wait: Duration,
/// }
/// let s: Settings = serde_json::from_str(r#"{ "wait": "250ms" }"#).unwrap();
/// assert_eq!(s.wait, Duration::from_millis(250));
/// ```
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
        s.collect_str(&crate::duration::Text {
            duration: *d,
            bare_unit: false,
        })
    }

    /// Reads a duration written as text.
    ///
    /// # Errors
    ///
    /// One quoting the text when it is not a count and a unit.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        crate::duration::parse(text.trim()).map_err(serde::de::Error::custom)
    }

    use serde::Deserialize as _;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// Quotas, leases, algorithms and durations read from and written to
    /// configuration text, with errors that quote what was wrong.
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
        // The attributes' grammar: parts summed.
        let summed: Lease = serde_json::from_str(r#"{"fixed":"1m30s"}"#).unwrap();
        assert_eq!(summed, Lease::Fixed(Duration::from_secs(90)));
        assert_eq!(
            serde_json::to_string(&summed).unwrap(),
            r#"{"fixed":"90s"}"#
        );
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
