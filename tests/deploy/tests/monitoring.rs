//! `packaging/kubernetes/monitoring`: the headless Service over the node agents' `metrics` port,
//! the Prometheus Operator ServiceMonitor over that Service, and the Grafana dashboard whose
//! queries name only metrics and labels the arbiter exports (docs/metrics.md) plus the `node`
//! label the ServiceMonitor adds.

use std::collections::{BTreeMap, BTreeSet};

use gpuslice_deploy_tests::{
    kubectl_or_skip, kubernetes_dir, named, objects, render_strict, repo_root, s, strs,
};
use serde_json::Value;

/// Metric name → label names, from the tables of docs/metrics.md.
fn documented_metrics() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    let mut out = BTreeMap::new();
    for line in doc.lines() {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `name` | type | labels | meaning |
        if cols.len() < 5 || !cols[1].starts_with("`gpuslice_") {
            continue;
        }
        let name = cols[1].trim_matches('`').to_string();
        out.insert(name, label_names(cols[3]));
    }
    out
}

/// The label names of a docs/metrics.md labels cell: `slice, kind (`memory`, …), window=`1s``.
fn label_names(cell: &str) -> BTreeSet<String> {
    let mut plain = String::new();
    let mut depth = 0;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split(',')
        .map(|p| {
            p.trim()
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect::<String>()
        })
        .filter(|n| !n.is_empty())
        .collect()
}

#[test]
fn label_cells_are_read_without_their_value_lists() {
    assert_eq!(
        label_names("slice, kind (`memory`, `lease`), action (`kill`, `log`)"),
        BTreeSet::from(["slice".into(), "kind".into(), "action".into()])
    );
    assert_eq!(
        label_names("slice, device, window=`1s`/`10s`"),
        BTreeSet::from(["slice".into(), "device".into(), "window".into()])
    );
    assert!(label_names("").is_empty());
}

/// What is wrong with one PromQL expression: metric names not exported, grouping or matcher
/// labels that none of its metrics carry (besides `extra`, labels added at scrape time).
fn query_problems(
    expr: &str,
    metrics: &BTreeMap<String, BTreeSet<String>>,
    extra: &[&str],
) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut problems = Vec::new();
    let mut labels: BTreeSet<String> = extra.iter().map(|s| s.to_string()).collect();
    let mut used = 0;
    for w in expr
        .split(|c| !ident(c))
        .filter(|w| w.starts_with("gpuslice_"))
    {
        match metrics.get(w) {
            Some(l) => {
                used += 1;
                labels.extend(l.iter().cloned());
            }
            None => problems.push(format!("{w} is not a documented metric")),
        }
    }
    if used == 0 && problems.is_empty() {
        problems.push("names no gpuslice metric".into());
    }
    // Labels named in `by (a, b)` groupings and `{a="…", b=~"…"}` matchers.
    let mut named = Vec::new();
    for (open, close) in [("by (", ')'), ("{", '}')] {
        for part in expr.split(open).skip(1) {
            let inner = part.split(close).next().unwrap_or_default();
            for item in inner.split(',') {
                let name: String = item.trim().chars().take_while(|c| ident(*c)).collect();
                if !name.is_empty() {
                    named.push(name);
                }
            }
        }
    }
    for l in named {
        if !labels.contains(&l) {
            problems.push(format!("label {l} is on none of its metrics"));
        }
    }
    problems
}

#[test]
fn the_query_check_catches_unknown_metrics_and_labels() {
    let metrics = BTreeMap::from([
        ("gpuslice_slices".to_string(), BTreeSet::<String>::new()),
        (
            "gpuslice_device_slices".to_string(),
            BTreeSet::from(["device".to_string(), "uuid".to_string()]),
        ),
    ]);
    let ok = |e: &str| query_problems(e, &metrics, &["node"]);
    assert!(ok(r#"sum by (node) (gpuslice_slices{node=~"$node"})"#).is_empty());
    assert!(ok(r#"sum by (node, device) (gpuslice_device_slices)"#).is_empty());
    assert_eq!(
        ok("gpuslice_slice_nonsense"),
        ["gpuslice_slice_nonsense is not a documented metric"]
    );
    assert_eq!(
        ok("sum by (node, pod) (gpuslice_slices)"),
        ["label pod is on none of its metrics"]
    );
    assert_eq!(
        ok(r#"gpuslice_slices{namespace="x"}"#),
        ["label namespace is on none of its metrics"]
    );
    assert_eq!(ok("vector(1)"), ["names no gpuslice metric"]);
}

#[test]
fn monitoring_renders_a_service_a_servicemonitor_and_the_dashboard() {
    let Some(kubectl) = kubectl_or_skip("monitoring") else {
        return;
    };
    let objs = render_strict(&kubectl, "monitoring");
    let kinds: BTreeSet<&str> = objs.iter().map(|o| s(&o["kind"])).collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["ConfigMap", "Service", "ServiceMonitor"])
    );
    for o in &objs {
        assert_eq!(
            o["metadata"]["namespace"], "gpuslice-system",
            "{}",
            o["kind"]
        );
    }
    // The Service selects the node agent's Pods and names the arbiter's metrics port.
    let agent = render_strict(&kubectl, "base");
    let ds = objects(&agent, "DaemonSet")[0];
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let svc = objects(&objs, "Service")[0];
    assert_eq!(svc["spec"]["clusterIP"], "None", "one endpoint per agent");
    let sel = svc["spec"]["selector"].as_object().unwrap();
    assert!(!sel.is_empty());
    for (k, v) in sel {
        assert_eq!(&pod_labels[k], v, "selector {k}");
    }
    let arbiter = named(&ds["spec"]["template"]["spec"]["containers"], "arbiter");
    let port = named(&svc["spec"]["ports"], "metrics");
    let container_port = named(&arbiter["ports"], s(&port["targetPort"]));
    assert_eq!(port["port"], container_port["containerPort"]);
    // The ServiceMonitor selects that Service, in its namespace, on that port.
    let sm = objects(&objs, "ServiceMonitor")[0];
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "ServiceMonitor selector {k}"
        );
    }
    assert!(strs(&sm["spec"]["namespaceSelector"]["matchNames"])
        .contains(&s(&svc["metadata"]["namespace"])));
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], "metrics");
    assert_eq!(ep["path"], "/metrics");
    let added: Vec<&str> = ep["relabelings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| s(&r["targetLabel"]))
        .collect();
    assert_eq!(added, ["node"]);
    // The dashboard ConfigMap: the Grafana sidecar's label, the file as it is.
    let cm = objects(&objs, "ConfigMap")[0];
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let file = std::fs::read_to_string(kubernetes_dir().join("monitoring/dashboard.json")).unwrap();
    assert_eq!(s(&cm["data"]["gpuslice.json"]), file);
    check_dashboard(&serde_json::from_str(&file).unwrap(), &added);
}

fn check_dashboard(d: &Value, scrape_labels: &[&str]) {
    assert_eq!(d["uid"], "gpuslice-node");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| s(&v["name"]))
        .collect();
    assert_eq!(vars, ["datasource", "node"]);
    let metrics = documented_metrics();
    assert!(metrics.len() > 20, "docs/metrics.md tables: {metrics:?}");
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    let mut ids = BTreeSet::new();
    let mut problems = Vec::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id {}",
            p["id"]
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}");
        for t in p["targets"].as_array().unwrap() {
            let expr = s(&t["expr"]);
            assert!(expr.contains(r#"node=~"$node""#), "{}: {expr}", p["title"]);
            for e in query_problems(expr, &metrics, scrape_labels) {
                problems.push(format!("{}: {e}", p["title"]));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
