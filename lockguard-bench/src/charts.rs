//! The report's main figures as SVG charts, drawn from its own tables.
//!
//! `--write FILE` (and `--charts FILE`, which draws from a report already
//! written) reads the report's Markdown tables back: every contention
//! table with a `variant` column and `handoff p50`/`handoff p99` columns
//! becomes one chart of handoff latency against contenders for its store,
//! and every uncontended table whose rows are numbers of tasks gives its
//! store's ratio column (with its range) to one chart of uncontended
//! ratios. The charts are written to a `benchmarks/` directory beside the
//! report, and a link to each is put under the table it was drawn from
//! (once: drawing again replaces the files and keeps the links).

use std::fmt::Write as _;
use std::path::Path;

/// One Markdown table, with the headings it sits under.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// The last `## ` heading above it.
    pub(crate) section: String,
    /// The last `### ` heading above it within that section (empty if none).
    pub(crate) subsection: String,
    pub(crate) headers: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
    /// The index of its last line in the report.
    pub(crate) last_line: usize,
}

impl Table {
    fn column(&self, name: impl Fn(&str) -> bool) -> Option<usize> {
        self.headers.iter().position(|h| name(h))
    }
}

/// The tables of a Markdown report, in order.
pub(crate) fn tables(report: &str) -> Vec<Table> {
    let lines: Vec<&str> = report.lines().collect();
    let (mut section, mut subsection) = (String::new(), String::new());
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(h) = line.strip_prefix("## ") {
            section = h.trim().to_owned();
            subsection.clear();
        } else if let Some(h) = line.strip_prefix("### ") {
            subsection = h.trim().to_owned();
        } else if line.starts_with('|')
            && lines.get(i + 1).is_some_and(|l| {
                l.starts_with("|--") || l.starts_with("|:-") || l.starts_with("|-")
            })
        {
            let headers = cells(line);
            let mut rows = Vec::new();
            let mut j = i + 2;
            while j < lines.len() && lines[j].starts_with('|') {
                rows.push(cells(lines[j]));
                j += 1;
            }
            out.push(Table {
                section: section.clone(),
                subsection: subsection.clone(),
                headers,
                rows,
                last_line: j - 1,
            });
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_owned()).collect()
}

/// The store a section of the report measures: the name before its colon
/// for the stores' own sections, Redis for the rest (the report's default).
fn store_of(section: &str) -> String {
    const STORES: [&str; 5] = [
        "PostgreSQL",
        "MySQL/MariaDB",
        "ZooKeeper",
        "etcd",
        "Redis Cluster",
    ];
    let head = section.split(':').next().unwrap_or_default().trim();
    STORES
        .iter()
        .find(|s| head == **s)
        .map_or_else(|| "Redis".to_owned(), |s| (*s).to_owned())
}

/// A latency cell (`364.0 µs`, `4.9 ms`, `1.2 s`) in microseconds.
pub(crate) fn micros(cell: &str) -> Option<f64> {
    let cell = cell.trim();
    let (number, unit) = cell.split_once(' ')?;
    let n: f64 = number.replace(',', "").parse().ok()?;
    match unit.trim() {
        "µs" | "us" => Some(n),
        "ms" => Some(n * 1e3),
        "s" => Some(n * 1e6),
        _ => None,
    }
    .filter(|v| v.is_finite() && *v > 0.0)
}

/// A ratio cell (`0.91x`, `0.91x (0.86–0.92x)`): the ratio.
pub(crate) fn ratio(cell: &str) -> Option<f64> {
    let first = cell.split_whitespace().next()?;
    first
        .strip_suffix('x')?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
}

/// A range cell (`0.86–0.92x`): its ends.
pub(crate) fn range(cell: &str) -> Option<(f64, f64)> {
    let cell = cell.trim().trim_start_matches('(').trim_end_matches(')');
    let (lo, hi) = cell.split_once('–')?;
    let lo = lo.trim().trim_end_matches('x').parse().ok()?;
    let hi = hi.trim().trim_end_matches('x').parse().ok()?;
    Some((lo, hi))
}

/// One variant's handoff latencies against contenders.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub(crate) variant: String,
    /// (contenders, p50 µs, p99 µs), in the table's order.
    pub(crate) points: Vec<(f64, f64, f64)>,
}

/// A handoff chart: one store's contention table.
#[derive(Debug, Clone)]
pub(crate) struct Handoffs {
    pub(crate) store: String,
    pub(crate) series: Vec<Series>,
    /// The table's last line in the report: the link goes under it.
    pub(crate) after_line: usize,
}

/// The handoff charts the report's contention tables give, one per table.
pub(crate) fn handoffs(tables: &[Table]) -> Vec<Handoffs> {
    let mut out = Vec::new();
    for t in tables {
        let (Some(variant), Some(p50), Some(p99)) = (
            t.column(|h| h == "variant"),
            t.column(|h| h == "handoff p50"),
            t.column(|h| h == "handoff p99"),
        ) else {
            continue;
        };
        if !matches!(
            t.headers.first().map(String::as_str),
            Some("tasks" | "contenders")
        ) {
            continue;
        }
        let mut series: Vec<Series> = Vec::new();
        for row in &t.rows {
            let (Some(n), Some(a), Some(b)) = (
                row.first().and_then(|c| c.parse::<f64>().ok()),
                row.get(p50).and_then(|c| micros(c)),
                row.get(p99).and_then(|c| micros(c)),
            ) else {
                continue;
            };
            let name = row.get(variant).cloned().unwrap_or_default();
            match series.iter_mut().find(|s| s.variant == name) {
                Some(s) => s.points.push((n, a, b)),
                None => series.push(Series {
                    variant: name,
                    points: vec![(n, a, b)],
                }),
            }
        }
        if !series.is_empty() {
            out.push(Handoffs {
                store: store_of(&t.section),
                series,
                after_line: t.last_line,
            });
        }
    }
    out
}

/// One point of an uncontended chart: tasks, the ratio, and its range.
pub(crate) type Ratio = (u32, f64, Option<(f64, f64)>);

/// One store's uncontended ratios: against what, and its points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ratios {
    pub(crate) store: String,
    pub(crate) against: String,
    pub(crate) points: Vec<Ratio>,
}

/// The uncontended ratios of the report: from each table under an
/// "Uncontended" heading whose rows are numbers of tasks, its first ratio
/// column (and the range beside it).
pub(crate) fn uncontended(tables: &[Table]) -> Vec<Ratios> {
    let mut out = Vec::new();
    for t in tables {
        let heading = if t.subsection.is_empty() {
            &t.section
        } else {
            &t.subsection
        };
        if !heading.starts_with("Uncontended lock")
            || t.headers.first().map(String::as_str) != Some("tasks")
        {
            continue;
        }
        let Some(r) = t.column(|h| h.starts_with("ratio")) else {
            continue;
        };
        let has_range = t.headers.get(r + 1).is_some_and(|h| h == "range");
        let against = t
            .headers
            .get(2)
            .map(|h| {
                h.replace(" cycles/s", "")
                    .replace(" (median)", "")
                    .replace('`', "")
            })
            .unwrap_or_default();
        let points: Vec<_> = t
            .rows
            .iter()
            .filter_map(|row| {
                let tasks = row.first()?.parse().ok()?;
                let value = ratio(row.get(r)?)?;
                let spread = if has_range {
                    row.get(r + 1).and_then(|c| range(c))
                } else {
                    None
                };
                Some((tasks, value, spread))
            })
            .collect();
        if !points.is_empty() {
            out.push(Ratios {
                store: store_of(&t.section),
                against,
                points,
            });
        }
    }
    out
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The start of a chart `w` by `ht`: the `<svg>` element, a white ground
/// and `title` centred on `title_x`.
fn svg_open(w: f64, ht: f64, title_x: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{ht}" viewBox="0 0 {w} {ht}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{ht}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{title_x}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        escape(title)
    );
    s
}

/// Log-scale ticks (1, 2, 5 per decade) between `lo` and `hi`.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo && t <= hi {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

fn latency_label(us: f64) -> String {
    if us >= 1000.0 {
        format!("{} ms", us / 1000.0)
    } else {
        format!("{us} µs")
    }
}

/// The SVG of one store's handoff chart: p50 (solid, circles) and p99
/// (dashed, squares) of each variant against contenders, both axes
/// logarithmic. Each series is one `<polyline>` with `data-series`, each
/// point one marker with `data-contenders` and `data-micros`.
pub(crate) fn handoff_svg(h: &Handoffs) -> String {
    let (w, ht) = (720.0, 400.0);
    let (left, right, top, bottom) = (70.0, 270.0, 40.0, 50.0);
    let xs: Vec<f64> = h
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let ys: Vec<f64> = h
        .series
        .iter()
        .flat_map(|s| s.points.iter().flat_map(|p| [p.1, p.2]))
        .collect();
    let (xlo, xhi) = (
        xs.iter().copied().fold(f64::MAX, f64::min),
        xs.iter().copied().fold(0.0, f64::max),
    );
    let ylo = 10f64.powf(ys.iter().copied().fold(f64::MAX, f64::min).log10().floor());
    let yhi = 10f64.powf(ys.iter().copied().fold(0.0, f64::max).log10().ceil());
    let span = |lo: f64, hi: f64| if hi > lo { hi.ln() - lo.ln() } else { 1.0 };
    let x = |v: f64| left + (v.ln() - xlo.ln()) / span(xlo, xhi) * (w - left - right);
    let y = |v: f64| ht - bottom - (v.ln() - ylo.ln()) / span(ylo, yhi) * (ht - top - bottom);
    let title = format!("{}: handoff latency against contenders", h.store);
    let mut s = svg_open(w, ht, (left + w - right) / 2.0, &title);
    // Axes, grid and ticks.
    for t in log_ticks(ylo, yhi) {
        let yy = y(t);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0,
            latency_label(t)
        );
    }
    let mut contenders: Vec<f64> = xs.clone();
    contenders.sort_by(f64::total_cmp);
    contenders.dedup();
    for c in &contenders {
        let xx = x(*c);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{top}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">{c}</text>"##,
            ht - bottom,
            ht - bottom + 16.0
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{left}" x2="{left}" y1="{top}" y2="{b}" stroke="black"/><line x1="{left}" x2="{r}" y1="{b}" y2="{b}" stroke="black"/>"#,
        b = ht - bottom,
        r = w - right
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">contenders</text>"#,
        (left + w - right) / 2.0,
        ht - 12.0
    );
    // The series and the legend.
    for (i, series) in h.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let name = escape(&series.variant);
        for (which, dash, pick) in [
            ("p50", "", 1usize),
            ("p99", r#" stroke-dasharray="5,4""#, 2),
        ] {
            let pts: Vec<String> = series
                .points
                .iter()
                .map(|p| {
                    let v = if pick == 1 { p.1 } else { p.2 };
                    format!("{:.1},{:.1}", x(p.0), y(v))
                })
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline data-series="{name} {which}" fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                pts.join(" ")
            );
            for p in &series.points {
                let v = if pick == 1 { p.1 } else { p.2 };
                let (cx, cy) = (x(p.0), y(v));
                let shape = if pick == 1 {
                    format!(r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="3.5" fill="{color}""#)
                } else {
                    format!(
                        r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="white" stroke="{color}""#,
                        cx - 3.5,
                        cy - 3.5
                    )
                };
                let _ = writeln!(
                    s,
                    r#"{shape} data-point="{name} {which}" data-contenders="{}" data-micros="{v}"><title>{name}, {} contenders: {which} {}</title></{}>"#,
                    p.0,
                    p.0,
                    latency_label(v),
                    if pick == 1 { "circle" } else { "rect" }
                );
            }
        }
        let ly = top + 10.0 + i as f64 * 50.0;
        let lx = w - right + 14.0;
        let _ = writeln!(s, r#"<text x="{lx}" y="{ly}">{name}</text>"#);
        for (k, (which, dash)) in [("p50", ""), ("p99", r#" stroke-dasharray="5,4""#)]
            .iter()
            .enumerate()
        {
            let yy = ly + 14.0 + k as f64 * 14.0;
            let _ = writeln!(
                s,
                r##"<line x1="{lx}" x2="{}" y1="{yy}" y2="{yy}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}" fill="#555">{which}</text>"##,
                lx + 22.0,
                lx + 28.0,
                yy + 4.0
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// The SVG of the uncontended ratios: for each store, a bar per number of
/// tasks (its ratio to the store's yardstick), with the range of the
/// rounds as a whisker, a line at 1.0 and the 0.9x target dashed. Each bar
/// is one `<rect>` with `data-store`, `data-tasks` and `data-ratio`.
pub(crate) fn uncontended_svg(ratios: &[Ratios]) -> String {
    let (w, ht) = (720.0, 380.0);
    let (left, right, top, bottom) = (60.0, 20.0, 40.0, 90.0);
    let mut tasks: Vec<u32> = ratios
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.0))
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    let yhi = ratios
        .iter()
        .flat_map(|r| {
            r.points
                .iter()
                .map(|p| p.2.map_or(p.1, |(_, hi)| hi.max(p.1)))
        })
        .fold(1.2f64, f64::max)
        .min(3.0);
    let yhi = (yhi / 0.2).ceil() * 0.2;
    let y = |v: f64| ht - bottom - v.min(yhi) / yhi * (ht - top - bottom);
    let group = (w - left - right) / ratios.len().max(1) as f64;
    let bar = (group * 0.8) / tasks.len().max(1) as f64;
    let mut s = svg_open(
        w,
        ht,
        w / 2.0,
        "Uncontended lock cycles: lockguard's rate over each store's yardstick",
    );
    let mut v = 0.0;
    while v <= yhi + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{v:.1}x</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
        v += 0.2;
    }
    for (i, r) in ratios.iter().enumerate() {
        let gx = left + i as f64 * group + group * 0.1;
        for (tasks_i, t) in tasks.iter().enumerate() {
            let Some(p) = r.points.iter().find(|p| p.0 == *t) else {
                continue;
            };
            let color = COLORS[tasks_i % COLORS.len()];
            let bx = gx + tasks_i as f64 * bar;
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}" data-store="{}" data-tasks="{t}" data-ratio="{}"><title>{}, {t} tasks: {}x</title></rect>"#,
                y(p.1),
                bar * 0.9,
                y(0.0) - y(p.1),
                escape(&r.store),
                p.1,
                escape(&r.store),
                p.1
            );
            if let Some((lo, hi)) = p.2 {
                let cx = bx + bar * 0.45;
                let _ = writeln!(
                    s,
                    r#"<line x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
                    y(lo),
                    y(hi)
                );
            }
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{}" text-anchor="middle">{}</text><text x="{:.1}" y="{}" text-anchor="middle" fill="#555" font-size="10">vs {}</text>"##,
            gx + group * 0.4,
            ht - bottom + 16.0,
            escape(&r.store),
            gx + group * 0.4,
            ht - bottom + 30.0,
            escape(&r.against)
        );
    }
    let _ = writeln!(
        s,
        r#"<line x1="{left}" x2="{}" y1="{y1:.1}" y2="{y1:.1}" stroke="black"/><line x1="{left}" x2="{}" y1="{y9:.1}" y2="{y9:.1}" stroke="black" stroke-dasharray="6,4"/>"#,
        w - right,
        w - right,
        y1 = y(1.0),
        y9 = y(0.9)
    );
    for (i, t) in tasks.iter().enumerate() {
        let lx = left + i as f64 * 90.0;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{t} task{}</text>"#,
            ht - 36.0,
            COLORS[i % COLORS.len()],
            lx + 16.0,
            ht - 26.0,
            if *t == 1 { "" } else { "s" }
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#555" font-size="10">whiskers: the lowest and highest round; dashed: the 0.9x target</text>"##,
        w - right - 360.0,
        ht - 26.0
    );
    s.push_str("</svg>\n");
    s
}

fn slug(store: &str) -> String {
    store
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// Draws the charts of `report` into `benchmarks/` beside `path` and
/// returns the report with a link to each under its table (kept where it
/// is already there).
pub(crate) fn draw(report: &str, path: &Path) -> std::io::Result<String> {
    let dir = path.parent().unwrap_or(Path::new(".")).join("benchmarks");
    std::fs::create_dir_all(&dir)?;
    let all = tables(report);
    let mut links: Vec<(usize, String)> = Vec::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for h in handoffs(&all) {
        let n = seen.entry(h.store.clone()).or_default();
        *n += 1;
        let name = if *n == 1 {
            format!("handoff-{}.svg", slug(&h.store))
        } else {
            format!("handoff-{}-{n}.svg", slug(&h.store))
        };
        std::fs::write(dir.join(&name), handoff_svg(&h))?;
        links.push((
            h.after_line,
            format!(
                "![{}: handoff p50 and p99 against contenders](benchmarks/{name})",
                h.store
            ),
        ));
    }
    let ratios = uncontended(&all);
    if !ratios.is_empty() {
        std::fs::write(dir.join("uncontended.svg"), uncontended_svg(&ratios))?;
        let first = all
            .iter()
            .find(|t| {
                let heading = if t.subsection.is_empty() {
                    &t.section
                } else {
                    &t.subsection
                };
                heading.starts_with("Uncontended lock")
                    && t.headers.first().map(String::as_str) == Some("tasks")
            })
            .map(|t| t.last_line);
        if let Some(line) = first {
            links.push((
                line,
                "![Uncontended cycles: lockguard's ratio to each store's yardstick, every store](benchmarks/uncontended.svg)".to_owned(),
            ));
        }
    }
    let mut out = String::new();
    let lines: Vec<&str> = report.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        out.push('\n');
        for (_, link) in links.iter().filter(|(at, _)| *at == i) {
            // Kept where a link to the same file already follows the table.
            let target = link.rsplit_once('(').map_or("", |(_, t)| t);
            let already = lines
                .iter()
                .skip(i + 1)
                .take(3)
                .any(|l| l.starts_with("![") && l.ends_with(target));
            if !already {
                out.push('\n');
                out.push_str(link);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
# Benchmarks

## Uncontended lock + unlock cycles (distinct keys)

| tasks | lockguard cycles/s (median) | raw redis-rs cycles/s (median) | ratio (median) | range | client CPU |
|---:|---:|---:|---:|---:|---:|
| 1 | 5771 | 7297 | 0.78x | 0.51–0.95x | 79.9 / 76.9 |
| 16 | 22352 | 36942 | 0.60x | 0.50–0.67x | 30.6 / 23.9 |

## Contention: contenders on one key

| tasks | variant | acquisitions/s | ratio to raw spin (range) | handoff p50 | handoff p99 | commands |
|---:|---|---:|---:|---:|---:|---:|
| 4 | lockguard | 625 | 0.84x (0.82–0.86x) | 364.0 µs | 1.2 ms | 3.00 |
| 4 | raw spin | 740 |  | 151.4 µs | 417.2 µs | 36.90 |
| 16 | lockguard | 630 | 1.07x (1.04–1.08x) | 376.7 µs | 699.7 µs | 2.99 |
| 16 | raw spin | 603 |  | 220.0 µs | 4145.1 µs | 101.58 |

## etcd: lockguard beside etcd's own `Lock` RPC

### Uncontended lock + unlock cycles (distinct keys)

| tasks | lockguard cycles/s (median) | `Lock` RPC (median) | election (median) | ratio to `Lock` RPC | range |
|---:|---:|---:|---:|---:|---:|
| 1 | 762 | 854 | 743 | 0.91x | 0.86–0.92x |

### Contention

| contenders | variant | acquisitions/s | handoff p50 | handoff p99 |
|---:|---|---:|---:|---:|
| 4 | lockguard | 304 | 1340.5 µs | 9690.2 µs |
| 4 | `Lock` RPC | 38 | 1343.8 µs | 93222.2 µs |
";

    #[test]
    fn cells_parse() {
        assert_eq!(micros("364.0 µs"), Some(364.0));
        assert_eq!(micros("1.2 ms"), Some(1200.0));
        assert_eq!(micros("–"), None);
        assert_eq!(ratio("0.84x (0.82–0.86x)"), Some(0.84));
        assert_eq!(range("0.82–0.86x"), Some((0.82, 0.86)));
        assert_eq!(range(""), None);
    }

    #[test]
    fn each_contention_table_gives_its_store_a_chart() {
        let h = handoffs(&tables(REPORT));
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].store, "Redis");
        assert_eq!(h[1].store, "etcd");
        assert_eq!(
            h[0].series,
            vec![
                Series {
                    variant: "lockguard".into(),
                    points: vec![(4.0, 364.0, 1200.0), (16.0, 376.7, 699.7)],
                },
                Series {
                    variant: "raw spin".into(),
                    points: vec![(4.0, 151.4, 417.2), (16.0, 220.0, 4145.1)],
                },
            ]
        );
    }

    #[test]
    fn uncontended_ratios_come_from_each_store() {
        let r = uncontended(&tables(REPORT));
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].store.as_str(), r[0].against.as_str()),
            ("Redis", "raw redis-rs")
        );
        assert_eq!(
            r[0].points,
            vec![(1, 0.78, Some((0.51, 0.95))), (16, 0.6, Some((0.5, 0.67)))]
        );
        assert_eq!(
            (r[1].store.as_str(), r[1].against.as_str()),
            ("etcd", "Lock RPC")
        );
    }

    /// The values of `attr` on the elements of `svg` that carry `marker`.
    fn attrs<'a>(svg: &'a str, marker: &str, attr: &str) -> Vec<&'a str> {
        svg.lines()
            .filter(|l| l.contains(marker))
            .filter_map(|l| {
                let start = l.find(&format!("{attr}=\""))? + attr.len() + 2;
                let end = l[start..].find('"')? + start;
                Some(&l[start..end])
            })
            .collect()
    }

    #[test]
    fn the_handoff_svg_has_a_line_per_series_and_a_marker_per_point() {
        let h = &handoffs(&tables(REPORT))[0];
        let svg = handoff_svg(h);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let series = attrs(&svg, "<polyline", "data-series");
        assert_eq!(
            series,
            [
                "lockguard p50",
                "lockguard p99",
                "raw spin p50",
                "raw spin p99"
            ]
        );
        let micros: Vec<f64> = attrs(&svg, "data-point=\"lockguard p99\"", "data-micros")
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(micros, [1200.0, 699.7]);
        // On the log axis, the slower point is drawn higher (a smaller y).
        let ys: Vec<f64> = attrs(&svg, "data-point=\"lockguard p99\"", "y")
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(ys.len(), 2, "{svg}");
        assert!(ys[0] < ys[1], "{ys:?}");
    }

    #[test]
    fn the_uncontended_svg_has_a_bar_per_store_and_tasks() {
        let svg = uncontended_svg(&uncontended(&tables(REPORT)));
        let bars: Vec<(&str, &str, &str)> = svg
            .lines()
            .filter(|l| l.contains("data-ratio"))
            .map(|l| {
                let get = |a: &str| attrs(l, "data-ratio", a)[0];
                (get("data-store"), get("data-tasks"), get("data-ratio"))
            })
            .collect();
        assert_eq!(
            bars,
            [
                ("Redis", "1", "0.78"),
                ("Redis", "16", "0.6"),
                ("etcd", "1", "0.91")
            ]
        );
    }

    #[test]
    fn drawing_links_each_chart_under_its_table_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("B.md");
        let once = draw(REPORT, &path).unwrap();
        let twice = draw(&once, &path).unwrap();
        assert_eq!(once, twice);
        assert_eq!(once.matches("](benchmarks/").count(), 3, "{once}");
        let table_end = once.find("| 16 | raw spin").unwrap();
        let link = once.find("](benchmarks/handoff-redis.svg)").unwrap();
        assert!(link > table_end && !once[table_end..link].contains("## "));
        for f in ["handoff-redis.svg", "handoff-etcd.svg", "uncontended.svg"] {
            let svg = std::fs::read_to_string(dir.path().join("benchmarks").join(f)).unwrap();
            assert!(svg.starts_with("<svg"), "{f}");
        }
    }
}
