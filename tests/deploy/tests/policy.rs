//! `packaging/kubernetes/policy`: only namespaces labelled `gpuslice.io/priority-high=allowed`
//! may ask for `priority: high`. Rendered and strictly checked; then the policies' shape: each
//! binding denies with an existing policy, each policy matches only unlabelled namespaces and the
//! right resources and operations, and its CEL reads exactly the keys gpuslice reads (annotation
//! and variable names from `gpuslice_api`, the DRA driver name from the kubelet plugin), the way
//! gpuslice reads them (trimmed, any case), with every variable it uses defined. No API server
//! here: the CEL is not evaluated (docs/kubernetes.md, "High priority", says so).

use std::collections::BTreeMap;

use gpuslice_api::request::{env, keys};
use gpuslice_api::Priority;
use gpuslice_deploy_tests::{kubectl_or_skip, objects, render_strict, repo_root, s, strs};
use serde_json::Value;

const LABEL: &str = "gpuslice.io/priority-high";

/// Every CEL expression of a policy, with where it is.
fn expressions(policy: &Value) -> Vec<(String, String)> {
    let spec = &policy["spec"];
    let mut out = Vec::new();
    for (list, fields) in [
        ("variables", &["expression"][..]),
        ("validations", &["expression", "messageExpression"][..]),
    ] {
        for (i, v) in spec[list].as_array().into_iter().flatten().enumerate() {
            for f in fields {
                if let Some(e) = v[*f].as_str() {
                    out.push((format!("{list}[{i}].{f}"), e.to_string()));
                }
            }
        }
    }
    out
}

/// Problems a CEL text shows without a parser: unbalanced brackets or quotes, and
/// `variables.X` that the policy does not define.
fn cel_shape_problems(expr: &str, defined: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut stack = Vec::new();
    let mut quote: Option<char> = None;
    for c in expr.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => stack.push(c),
            (None, ')' | ']' | '}') => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if stack.pop() != Some(want) {
                    problems.push(format!("unbalanced {c}"));
                }
            }
            _ => {}
        }
    }
    if quote.is_some() {
        problems.push("unterminated string".into());
    }
    if !stack.is_empty() {
        problems.push(format!("unclosed {stack:?}"));
    }
    for part in expr.split("variables.").skip(1) {
        let name: String = part
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !defined.contains(&name.as_str()) {
            problems.push(format!("variables.{name} is not defined"));
        }
    }
    problems
}

#[test]
fn the_shape_check_catches_broken_cel() {
    assert!(cel_shape_problems("size(variables.a) == 0 && 'x(' != \"]\"", &["a"]).is_empty());
    assert_eq!(cel_shape_problems("size(variables.b", &["a"]).len(), 2);
    assert_eq!(cel_shape_problems("a[0)", &[]), ["unbalanced )"]);
    assert_eq!(cel_shape_problems("f(a[0]", &[]), ["unclosed ['(']"]);
    assert_eq!(cel_shape_problems("'open", &[]), ["unterminated string"]);
}

#[test]
fn priority_high_policies_render_and_have_the_right_shape() {
    let Some(kubectl) = kubectl_or_skip("policy") else {
        return;
    };
    let objs = render_strict(&kubectl, "policy");
    let policies = objects(&objs, "ValidatingAdmissionPolicy");
    let bindings = objects(&objs, "ValidatingAdmissionPolicyBinding");
    assert_eq!(policies.len(), 3);
    assert_eq!(bindings.len(), 3);
    let by_name: BTreeMap<&str, &Value> = policies
        .iter()
        .map(|p| (s(&p["metadata"]["name"]), *p))
        .collect();
    for b in &bindings {
        let name = s(&b["spec"]["policyName"]);
        assert!(by_name.contains_key(name), "binding names {name}");
        assert_eq!(strs(&b["spec"]["validationActions"]), ["Deny"], "{name}");
        // No matchResources on the binding: the policy's own constraints decide.
        assert!(b["spec"]["matchResources"].is_null(), "{name}");
    }
    // What each policy matches: (group, resource, operation).
    let want: BTreeMap<&str, Vec<(&str, &str, &str)>> = BTreeMap::from([
        (
            "gpuslice-priority-high-pods",
            vec![
                ("", "pods", "CREATE"),
                ("", "pods/ephemeralcontainers", "UPDATE"),
            ],
        ),
        (
            "gpuslice-priority-high-claims",
            vec![("resource.k8s.io", "resourceclaims", "CREATE")],
        ),
        (
            "gpuslice-priority-high-claim-templates",
            vec![("resource.k8s.io", "resourceclaimtemplates", "CREATE")],
        ),
    ]);
    for (name, rules) in &want {
        let p = by_name[name];
        let spec = &p["spec"];
        assert_eq!(spec["failurePolicy"], "Fail", "{name}");
        let mc = &spec["matchConstraints"];
        let sel = &mc["namespaceSelector"]["matchExpressions"];
        assert_eq!(sel.as_array().unwrap().len(), 1, "{name}");
        assert_eq!(sel[0]["key"], LABEL, "{name}");
        assert_eq!(sel[0]["operator"], "NotIn", "{name}");
        assert_eq!(strs(&sel[0]["values"]), ["allowed"], "{name}");
        let got: Vec<(&str, &str, &str)> = mc["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| {
                let g = strs(&r["apiGroups"]);
                let res = strs(&r["resources"]);
                let ops = strs(&r["operations"]);
                assert_eq!((g.len(), res.len(), ops.len()), (1, 1, 1), "{name}: {r}");
                [(g[0], res[0], ops[0])]
            })
            .collect();
        assert_eq!(&got, rules, "{name}");
        // CEL: balanced, variables defined, messages name the label.
        let defined: Vec<&str> = spec["variables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| s(&v["name"]))
            .collect();
        let exprs = expressions(p);
        for (at, e) in &exprs {
            let problems = cel_shape_problems(e, &defined);
            assert!(problems.is_empty(), "{name} {at}: {problems:?}\n{e}");
        }
        for v in spec["validations"].as_array().unwrap() {
            assert!(
                s(&v["messageExpression"]).contains(&format!("{LABEL}=allowed")),
                "{name}: {v}"
            );
            assert_eq!(v["reason"], "Forbidden", "{name}");
        }
        let all: String = exprs.iter().map(|(_, e)| e.as_str()).collect();
        // Read as gpuslice reads it: trimmed and any case.
        assert_eq!(Priority::parse(" High "), Some(Priority::High));
        assert!(all.contains(".trim().lowerAscii() == 'high'"), "{name}");
        match *name {
            "gpuslice-priority-high-pods" => {
                assert!(all.contains(&format!("'{}'", keys::PRIORITY)), "{name}");
                assert!(all.contains(&format!("'{}'", env::PRIORITY)), "{name}");
                for list in ["containers", "initContainers", "ephemeralContainers"] {
                    assert!(
                        all.contains(&format!("object.spec.{list}")),
                        "{name}: {list}"
                    );
                }
                // A value admission cannot read is refused, not trusted.
                assert!(all.contains("has(e.valueFrom)"), "{name}");
            }
            _ => {
                let root = if name.ends_with("templates") {
                    "object.spec.spec.devices.config"
                } else {
                    "object.spec.devices.config"
                };
                assert!(all.contains(root), "{name}");
                let driver = gpuslice_kubelet_plugin::DRIVER;
                assert!(
                    all.contains(&format!("c.opaque.driver == '{driver}'")),
                    "{name}"
                );
                assert!(all.contains("c.opaque.parameters.priority"), "{name}");
            }
        }
    }
}

#[test]
fn the_docs_name_the_label_and_what_admission_cannot_see() {
    let doc = std::fs::read_to_string(repo_root().join("docs/kubernetes.md")).unwrap();
    assert!(doc.contains(&format!("{LABEL}=allowed")));
    assert!(doc.contains("envFrom"), "the envFrom gap is documented");
}
