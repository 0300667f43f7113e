//! The Grafana dashboard in `docs/grafana/lockguard.json` is valid JSON,
//! queries only the metrics lockguard records, and shows every one of
//! them: the table in `docs/observing.md` is the list.

use std::collections::BTreeSet;

/// Every `lockguard_...` name in `text`, with a Prometheus histogram's
/// `_bucket` suffix taken off.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("lockguard_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        names.insert(name.strip_suffix("_bucket").unwrap_or(name).to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_dashboard_shows_every_metric_lockguard_records_and_no_other() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dashboard = std::fs::read_to_string(format!("{root}/docs/grafana/lockguard.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&dashboard).expect("valid JSON");
    let mut queried = BTreeSet::new();
    for panel in json["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queried.extend(metric_names(target["expr"].as_str().expect("an expr")));
        }
    }
    let observing = std::fs::read_to_string(format!("{root}/docs/observing.md")).unwrap();
    let documented: BTreeSet<String> = observing
        .lines()
        .filter(|l| l.starts_with("| `lockguard_"))
        .flat_map(metric_names)
        .collect();
    assert!(documented.len() >= 10, "{documented:?}");
    assert_eq!(
        queried, documented,
        "the dashboard's metrics against docs/observing.md's table"
    );
}
