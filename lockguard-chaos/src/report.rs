//! A run's pictures, for people who would rather look than read: a
//! self-contained HTML page (`report.html` beside the histories) with a
//! timeline of holds per key and worker, the faults shaded over it and the
//! operations of any violation marked, and histograms of acquire and
//! handoff latency. Plain SVG, no script: it opens anywhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::check::{FaultSpan, Violation, handoff_pairs, holds};
use crate::clock::ms;
use crate::history::{Call, Op, Outcome};

/// The timeline's width and the height of one row, in pixels.
const WIDTH: f64 = 1200.0;
const ROW: f64 = 14.0;
/// The left margin, where the rows are named.
const LABELS: f64 = 160.0;

/// Writes `dir/report.html` for the run of `store` whose operations are
/// `ops`, with the checks' `violations`.
///
/// # Errors
///
/// When the file cannot be written.
pub(crate) fn write(
    dir: &Path,
    store: &str,
    ops: &[Op],
    violations: &[Violation],
) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join("report.html");
    std::fs::write(&path, page(store, ops, violations))?;
    Ok(path)
}

/// The page.
fn page(store: &str, ops: &[Op], violations: &[Violation]) -> String {
    let faults = crate::check::fault_spans(ops);
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lockguard-chaos: {store}</title>\
         <style>body{{font:14px sans-serif;margin:24px}} .hold{{fill:#4a7bd0}} .read{{fill:#8fb3ee}} \
         .fault{{fill:#f2b84b;opacity:.25}} .violation{{fill:none;stroke:#d62728;stroke-width:2}} \
         .bar{{fill:#4a7bd0}} text{{font:11px sans-serif}} li{{margin:4px 0}}</style></head><body>\n\
         <h1>{store}: {} operations, {} faults, {}</h1>\n",
        ops.len(),
        faults.len(),
        if violations.is_empty() {
            "every check passed".to_owned()
        } else {
            format!("{} violations", violations.len())
        }
    );
    html.push_str("<h2>Holds by key and worker</h2>\n<p>Blue: a hold, from the return of <code>acquire()</code> to the last <code>is_held()</code> that said true (light: a read hold). Shaded: a fault. Red outline: an operation of a violation.</p>\n");
    html.push_str(&timeline(ops, &faults, violations));
    let acquire: Vec<f64> = ops
        .iter()
        .filter_map(|o| match (&o.call, &o.done) {
            (Call::Acquire { .. }, Some((t, Outcome::Acquired { .. }))) => {
                Some(ms(t.saturating_sub(o.invoke)))
            }
            _ => None,
        })
        .collect();
    let handoff: Vec<f64> = handoff_pairs(ops)
        .into_iter()
        .map(|(rel, b)| ms(b.end().saturating_sub(rel.invoke)))
        .collect();
    html.push_str("<h2>Latency</h2>\n");
    html.push_str(&histogram(
        "acquire() until it returned holding (ms)",
        &acquire,
    ));
    html.push_str(&histogram(
        "handoff: release() invoked until the waiter's acquire() returned (ms)",
        &handoff,
    ));
    if !violations.is_empty() {
        html.push_str("<h2>Violations</h2>\n<ul>\n");
        for v in violations {
            let _ = write!(html, "<li><b>{}</b>: {}<ul>", v.check, escape(&v.what));
            for o in &v.ops {
                let _ = write!(html, "<li><code>{}</code></li>", escape(o));
            }
            html.push_str("</ul></li>\n");
        }
        html.push_str("</ul>\n");
    }
    html.push_str("</body></html>\n");
    html
}

/// The timeline: a row per (key, worker) that held the key, a rectangle
/// per hold (`class="hold"`, or `"hold read"`), one per fault over every
/// row (`class="fault"`), and an outline over each operation a violation
/// names, in its row when it has one (`class="violation"`).
pub(crate) fn timeline(ops: &[Op], faults: &[FaultSpan], violations: &[Violation]) -> String {
    let holds = holds(ops, faults);
    let t0 = ops.iter().map(|o| o.invoke).min().unwrap_or(0);
    let t1 = ops
        .iter()
        .map(|o| o.done.as_ref().map_or(o.invoke, |(t, _)| *t))
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let mut rows: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for h in &holds {
        rows.insert((h.key, h.acquire.w), 0);
    }
    for (i, row) in rows.values_mut().enumerate() {
        *row = i;
    }
    let x = |t: u64| LABELS + (WIDTH - LABELS) * (t.saturating_sub(t0) as f64) / ((t1 - t0) as f64);
    let height = ROW * rows.len().max(1) as f64 + 20.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\">"
    );
    for ((key, w), row) in &rows {
        let _ = writeln!(
            svg,
            "<text x=\"2\" y=\"{:.1}\">{} w{w}</text>",
            ROW * *row as f64 + ROW - 3.0,
            escape(key)
        );
    }
    for f in faults {
        let _ = writeln!(
            svg,
            "<rect class=\"fault\" x=\"{:.1}\" y=\"0\" width=\"{:.1}\" height=\"{height}\"><title>{} {}</title></rect>",
            x(f.from),
            (x(f.to.min(t1)) - x(f.from)).max(1.0),
            escape(&f.what),
            escape(&f.target)
        );
    }
    for h in &holds {
        let row = rows[&(h.key, h.acquire.w)];
        let _ = writeln!(
            svg,
            "<rect class=\"hold{}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} w{} fence {} ({:.1} to {:.1} ms)</title></rect>",
            if h.read { " read" } else { "" },
            x(h.from),
            ROW * row as f64 + 1.0,
            (x(h.to) - x(h.from)).max(1.0),
            ROW - 2.0,
            escape(h.key),
            h.acquire.w,
            h.fence,
            ms(h.from - t0),
            ms(h.to.saturating_sub(t0)),
        );
    }
    for v in violations {
        for named in &v.ops {
            let Some(o) = op_named(ops, named) else {
                continue;
            };
            let end = o.done.as_ref().map_or(t1, |(t, _)| *t);
            let (y, h) = match rows.get(&(o.call.key(), o.w)) {
                Some(row) => (ROW * *row as f64, ROW),
                None => (0.0, height),
            };
            let _ = writeln!(
                svg,
                "<rect class=\"violation\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\"><title>{}: {}</title></rect>",
                x(o.invoke),
                (x(end) - x(o.invoke)).max(2.0),
                v.check,
                escape(&v.what)
            );
        }
    }
    let _ = writeln!(
        svg,
        "<text x=\"{LABELS}\" y=\"{:.1}\">0 ms</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.0} ms</text>",
        height - 4.0,
        WIDTH - 2.0,
        height - 4.0,
        ms(t1 - t0)
    );
    svg.push_str("</svg>\n");
    svg
}

/// The operation a violation's description names (`w3#12 ...`).
fn op_named<'a>(ops: &'a [Op], described: &str) -> Option<&'a Op> {
    let id = described.split_whitespace().next()?.strip_prefix('w')?;
    let (w, op) = id.split_once('#')?;
    let (w, op): (u32, u64) = (w.parse().ok()?, op.parse().ok()?);
    ops.iter().find(|o| o.w == w && o.op == op)
}

/// A histogram of `samples` (ms) in 20 bins spaced by ratio, one bar each
/// (`class="bar"`), with its count and percentiles.
pub(crate) fn histogram(title: &str, samples: &[f64]) -> String {
    let mut out = format!("<h3>{}</h3>\n", escape(title));
    if samples.is_empty() {
        out.push_str("<p>none measured</p>\n");
        return out;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let _ = writeln!(
        out,
        "<p>{} samples; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms</p>",
        sorted.len(),
        pct(0.5),
        pct(0.99),
        sorted[sorted.len() - 1]
    );
    // Bins spaced by ratio (latencies span orders of magnitude) from the
    // p1 to the p99; the first and last hold what lies beyond.
    const BINS: usize = 20;
    let low = pct(0.01).max(0.001);
    let top = pct(0.99).max(low * 1.01);
    let span = (top / low).ln();
    let mut counts = [0usize; BINS];
    for s in &sorted {
        let at = (s.max(low) / low).ln() / span * (BINS - 1) as f64;
        counts[(at.floor() as usize).min(BINS - 1)] += 1;
    }
    let from = |i: usize| low * (span * i as f64 / (BINS - 1) as f64).exp();
    let most = counts.iter().copied().max().unwrap_or(1).max(1);
    let (w, h) = (600.0, 160.0);
    let bar = w / BINS as f64;
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{:.0}\">",
        h + 16.0
    );
    for (i, n) in counts.iter().enumerate() {
        let bh = h * *n as f64 / most as f64;
        let _ = writeln!(
            out,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\"><title>{n} from {:.3} ms</title></rect>",
            i as f64 * bar,
            h - bh,
            bar - 1.0,
            from(i)
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"0\" y=\"{:.0}\">{low:.3} ms and less</text><text x=\"{w}\" y=\"{:.0}\" text-anchor=\"end\">{top:.1} ms and more (bins by ratio)</text></svg>",
        h + 14.0,
        h + 14.0
    );
    out
}

/// `text` safe inside HTML and SVG.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::{hold, op};

    /// Counts the elements of `class` in `svg`, parsing it as XML enough
    /// to tell elements from text: every `<rect` start tag, by its class.
    fn elements(svg: &str, class: &str) -> usize {
        svg.split('<')
            .filter(|tag| tag.starts_with("rect "))
            .filter(|tag| {
                tag.split("class=\"")
                    .nth(1)
                    .and_then(|c| c.split('"').next())
                    .is_some_and(|c| c.split(' ').next() == Some(class))
            })
            .count()
    }

    #[test]
    fn one_element_per_hold_fault_and_violating_operation() {
        let mut ops = hold(1, 10, 1, 5);
        ops.extend(hold(2, 11, 7, 9));
        ops.extend(hold(1, 12, 11, 13));
        ops.push(op(
            0,
            Call::Fault {
                what: "pause-server".into(),
                target: "redis:1".into(),
            },
            3,
            Some((8, Outcome::Healed)),
        ));
        let faults = crate::check::fault_spans(&ops);
        let violation = Violation {
            check: "mutual-exclusion",
            what: "two holders <at once>".into(),
            ops: vec![ops[0].describe(0), ops[3].describe(0)],
        };
        let svg = timeline(&ops, &faults, &[violation]);
        assert_eq!(elements(&svg, "hold"), 3, "{svg}");
        assert_eq!(elements(&svg, "fault"), 1, "{svg}");
        assert_eq!(elements(&svg, "violation"), 2, "{svg}");
        // Every element is closed, and text is escaped.
        assert_eq!(svg.matches("<rect").count(), svg.matches("</rect>").count());
        assert!(svg.contains("&lt;at once&gt;") && !svg.contains("<at once>"));
        let bars = histogram("t", &[1.0, 2.0, 2.5, 9.0]);
        assert_eq!(elements(&bars, "bar"), 20);
        assert!(histogram("t", &[]).contains("none measured"));
    }
}
