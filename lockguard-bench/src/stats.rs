//! Redis command counts and latency percentiles.

use std::collections::BTreeMap;
use std::time::Duration;

/// Calls per command from `INFO commandstats`.
pub(crate) type CommandStats = BTreeMap<String, u64>;

/// Parses `INFO commandstats` (`cmdstat_evalsha:calls=12,usec=...`).
pub(crate) fn parse_commandstats(info: &str) -> CommandStats {
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Commands that only the harness sends (stats, handshakes).
const ADMIN: &[&str] = &[
    "info",
    "config|resetstat",
    "config|get",
    "client|setinfo",
    "ping",
    "hello",
    "config|set",
    "slowlog|reset",
    "slowlog|get",
];

/// One `SLOWLOG GET` entry: id, time, microseconds, arguments, client
/// address, client name.
pub(crate) type SlowlogEntry = (u64, u64, u64, Vec<Vec<u8>>, String, String);

/// The client address Redis logs for a call with no connection: a script's.
const SCRIPT_CLIENT: &str = "?:0";

/// The commands a client sent, and those scripts ran inside the server.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counted {
    pub(crate) sent: u64,
    pub(crate) internal: u64,
}

/// Splits the counts into commands the client sent (those in `sent_by_client`)
/// and calls made inside scripts (the rest, less the harness's own).
pub(crate) fn split(stats: &CommandStats, sent_by_client: &[&str]) -> Counted {
    let mut c = Counted::default();
    for (name, calls) in stats {
        if ADMIN.contains(&name.as_str()) {
            continue;
        }
        if sent_by_client.contains(&name.as_str()) {
            c.sent += calls;
        } else {
            c.internal += calls;
        }
    }
    c
}

/// Calls per command made inside scripts, from a slowlog that logged every
/// call.
pub(crate) fn script_calls(logged: &[SlowlogEntry]) -> CommandStats {
    let mut calls = CommandStats::new();
    for (_, _, _, args, client, _) in logged {
        if client != SCRIPT_CLIENT {
            continue;
        }
        let name = args
            .first()
            .map(|a| String::from_utf8_lossy(a).to_lowercase())
            .unwrap_or_default();
        *calls.entry(name).or_default() += 1;
    }
    calls
}

/// Splits the counts into commands clients sent (every call not made by a
/// script, less the harness's own) and calls made inside scripts.
pub(crate) fn split_by_origin(stats: &CommandStats, by_scripts: &CommandStats) -> Counted {
    let total: u64 = stats
        .iter()
        .filter(|(name, _)| !ADMIN.contains(&name.as_str()))
        .map(|(_, calls)| calls)
        .sum();
    let internal: u64 = by_scripts.values().sum();
    Counted {
        sent: total.saturating_sub(internal),
        internal,
    }
}

/// The `p`-th percentile (0..=100) of sorted samples.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// A duration in microseconds with one decimal, for tables.
pub(crate) fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_splits_commandstats() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5\r\ncmdstat_set:calls=10,usec=1\r\ncmdstat_info:calls=1,usec=1\r\n";
        let s = parse_commandstats(info);
        assert_eq!(s["evalsha"], 10);
        let c = split(&s, &["evalsha"]);
        assert_eq!((c.sent, c.internal), (10, 10));
    }

    #[test]
    fn splits_by_origin() {
        let info = "cmdstat_evalsha:calls=3,usec=5\r\ncmdstat_publish:calls=4,usec=1\r\ncmdstat_subscribe:calls=1,usec=1\r\ncmdstat_slowlog|get:calls=1,usec=1\r\n";
        let entry = |args: &[&str], client: &str| -> SlowlogEntry {
            let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            (0, 0, 0, args, client.to_owned(), String::new())
        };
        let logged = [
            entry(&["PUBLISH", "c", "t"], "?:0"),
            entry(&["PUBLISH", "c", "t"], "?:0"),
            entry(&["publish", "c", "t"], "127.0.0.1:5000"),
            entry(&["evalsha", "abc", "1", "k"], "127.0.0.1:5000"),
        ];
        let by_scripts = script_calls(&logged);
        assert_eq!(by_scripts["publish"], 2);
        let c = split_by_origin(&parse_commandstats(info), &by_scripts);
        assert_eq!((c.sent, c.internal), (6, 2));
    }

    #[test]
    fn percentiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_micros(51));
        assert_eq!(percentile(&v, 99.0), Duration::from_micros(99));
    }
}
