//! A deployment check's report: for the store behind a URL, what a lock's
//! guarantees depend on and whether this deployment provides it, line by
//! line. The stores make the findings (`lockguard_redis::check`,
//! `lockguard_postgres::check`); the facade's `lockguard::check(url)` and
//! the `lockguard check URL` command put them together.

use std::fmt;
use std::time::Duration;

/// How a finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Verdict {
    /// The deployment provides what the guarantee needs.
    Ok,
    /// It holds with a caveat the operator should know (a window after a
    /// crash, a setting worth a second look).
    Warn,
    /// A guarantee does not hold on this deployment.
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Verdict::Ok => "OK",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        })
    }
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// How it stands.
    pub verdict: Verdict,
    /// What was looked at: `maxmemory-policy`, `synchronous_commit`.
    pub subject: String,
    /// What was found, and what to do when it is not OK.
    pub detail: String,
    /// The guarantee it affects (`mutual exclusion`, `fencing`, ...), and
    /// where the safety notes explain it.
    pub guarantee: &'static str,
}

impl Finding {
    /// A finding.
    pub fn new(
        verdict: Verdict,
        subject: impl Into<String>,
        detail: impl Into<String>,
        guarantee: &'static str,
    ) -> Self {
        Self {
            verdict,
            subject: subject.into(),
            detail: detail.into(),
            guarantee,
        }
    }

    /// The finding `crash wait` of a store whose locks' leases a crash
    /// loses (a database's unlogged or in-memory table): after a crash no
    /// lock is taken anew for `bound`, the longest lease any lock took,
    /// which `table` records; `left` is what is left of a wait running
    /// now. A warning past five minutes, saying how to lower it.
    pub fn crash_wait(
        bound: Duration,
        left: Option<Duration>,
        table: &str,
        guarantee: &'static str,
    ) -> Self {
        let now = match left {
            Some(left) if !left.is_zero() => format!("; a wait runs now, {left:?} left"),
            _ => String::new(),
        };
        let (verdict, fix) = if bound > Duration::from_secs(300) {
            (
                Verdict::Warn,
                format!(
                    "; if no lock takes leases that long any more, lower {table} to the longest in use"
                ),
            )
        } else {
            (Verdict::Ok, String::new())
        };
        Self::new(
            verdict,
            "crash wait",
            format!(
                "{bound:?}: after a crash or a restart no lock is taken anew for the longest \
                 lease any lock took{now}{fix}"
            ),
            guarantee,
        )
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<4} {}: {} [{}]",
            self.verdict, self.subject, self.detail, self.guarantee
        )
    }
}

/// What a check found for one store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The store, as [`Client::store_name`](crate::Client::store_name)
    /// names it.
    pub store: String,
    /// The findings, in the order they were made.
    pub findings: Vec<Finding>,
}

impl Report {
    /// A report of `findings` on `store`.
    pub fn new(store: impl Into<String>, findings: Vec<Finding>) -> Self {
        Self {
            store: store.into(),
            findings,
        }
    }

    /// The worst verdict ([`Verdict::Ok`] for no findings).
    pub fn verdict(&self) -> Verdict {
        self.findings
            .iter()
            .map(|f| f.verdict)
            .max()
            .unwrap_or(Verdict::Ok)
    }

    /// Whether no finding fails.
    pub fn passed(&self) -> bool {
        self.verdict() != Verdict::Fail
    }

    /// The findings about `subject`.
    pub fn about<'a>(&'a self, subject: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
        self.findings.iter().filter(move |f| f.subject == subject)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:", self.store)?;
        for finding in &self.findings {
            writeln!(f, "  {finding}")?;
        }
        write!(f, "{}", self.verdict())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_finding_decides() {
        let mut r = Report::new("redis", vec![]);
        assert!(r.passed());
        r.findings.push(Finding::new(Verdict::Warn, "a", "b", "c"));
        assert_eq!(r.verdict(), Verdict::Warn);
        assert!(r.passed());
        r.findings.push(Finding::new(Verdict::Ok, "d", "e", "f"));
        r.findings.push(Finding::new(Verdict::Fail, "g", "h", "i"));
        assert!(!r.passed());
        assert_eq!(r.about("g").count(), 1);
        assert!(r.to_string().contains("FAIL g: h [i]"), "{r}");
    }
}
