//! Duration literals of the options: `"30s"`, `"250ms"`, `"1m30s"`.

use std::time::Duration;

/// The units a duration may use (the ones `lockguard::Quota`'s parser
/// takes too), each before any unit it starts with, so `ms` and `min` win
/// over `m` and `day` over `d`.
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
pub(crate) const DURATION_HELP: &str = "a duration is a whole number and a unit (ms, s, m, h, d), like \"30s\", \"250ms\" or \"1m30s\"";

/// Parses one or more `<number><unit>` parts, summed: `"30s"`, `"1m30s"`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
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
        let (number, after) = rest.split_at(digits);
        if after.starts_with('.') {
            return Err(format!(
                "duration {text:?} has a fraction; use a smaller unit, like \"1500ms\" for \"1.5s\""
            ));
        }
        let number: u64 = number
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
        total_ms = number
            .checked_mul(ms)
            .and_then(|part| total_ms.checked_add(part))
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        rest = &after[unit.len()..];
    }
    Ok(Duration::from_millis(total_ms))
}

/// Parses the period of a rate: a bare unit (`"s"` for one second) or a
/// duration (`"250ms"`).
pub(crate) fn parse_period(text: &str) -> Result<Duration, String> {
    match UNITS.iter().find(|(unit, _)| *unit == text) {
        Some(&(_, ms)) => Ok(Duration::from_millis(ms)),
        None => parse(text),
    }
}

/// A duration as users write it, for error messages.
pub(crate) fn display(d: Duration) -> String {
    let ms = d.as_millis();
    match UNITS
        .iter()
        .rev()
        .find(|(_, unit)| ms > 0 && ms.is_multiple_of(u128::from(*unit)))
    {
        Some((unit, size)) => format!("{}{unit}", ms / u128::from(*size)),
        None => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_sums() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1s500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "", "30", "s", "1.5s", "30 s", " 30s", "30sec", "-1s", "30x", "1m30",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse("99999999999999999999s").is_err());
        assert!(parse(&format!("{}d", u64::MAX / 1000)).is_err());
    }

    #[test]
    fn periods_take_bare_units() {
        assert_eq!(parse_period("s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_period("m"), Ok(Duration::from_secs(60)));
        // The spellings `lockguard::Quota` reads from configuration.
        assert_eq!(parse_period("min"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("5min"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1day"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_period("ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_period("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_period("sec").is_err());
    }

    #[test]
    fn displays_in_the_largest_whole_unit() {
        assert_eq!(display(Duration::from_secs(86_400)), "1d");
        assert_eq!(display(Duration::from_millis(1500)), "1500ms");
        assert_eq!(display(Duration::from_secs(90)), "90s");
        assert_eq!(display(Duration::ZERO), "0ms");
    }

    /// Every string of up to five characters over an alphabet of the
    /// tricky ones parses or is an error, never a panic.
    #[test]
    fn no_input_panics() {
        let alphabet = ['1', '9', 'm', 's', 'h', 'd', '.', '/', 'µ'];
        let mut inputs = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = inputs
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            inputs = longer;
            for i in &inputs {
                let _ = parse(i);
                let _ = parse_period(i);
                let _ = crate::rate::parse(i);
            }
        }
    }
}
