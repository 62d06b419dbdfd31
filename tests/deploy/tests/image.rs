//! The node image reference (docs/kubernetes.md, "The node image"): every manifest names the
//! never-pullable placeholder, the one `images:` entry of the documented site overlay sets it for
//! every container of every mode, and no `kubectl apply -k` the documents show would apply the
//! placeholder.

use std::path::PathBuf;

use gpuslice_deploy_tests::{
    container_images, kubectl_or_skip, kubernetes_dir, render, render_site, render_strict,
    repo_root, unset_images, write_site_dir, AGENT_DIRS, IMAGE_PLACEHOLDER,
};
use serde_json::Value;

/// The site's registry in these tests: `.test` is reserved (RFC 6761), no real host.
const SITE_IMAGE: &str = "site.registry.test/gpuslice";

#[test]
fn every_agent_container_names_only_the_untagged_placeholder() {
    let Some(kubectl) = kubectl_or_skip("image placeholder") else {
        return;
    };
    for dir in AGENT_DIRS {
        let objs = render_strict(&kubectl, dir);
        let images = container_images(&objs);
        assert!(images.len() >= 3, "{dir}: {images:?}");
        for (at, image) in images {
            assert_eq!(image, IMAGE_PLACEHOLDER, "{dir}: {at}");
        }
    }
}

#[test]
fn no_kustomization_of_ours_sets_an_image() {
    // An `images:` entry in a base does not reach the containers overlays add by patch, and any
    // reference written here would be one the project does not control: the site sets it.
    let mut stack = vec![kubernetes_dir()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "kustomization.yaml") {
                seen += 1;
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(
                    !text.lines().any(|l| l.starts_with("images:")),
                    "{} has an images: entry",
                    p.display()
                );
            }
        }
    }
    assert!(seen >= 9, "{seen} kustomizations found");
}

/// The site overlay block of docs/kubernetes.md ("The node image"), as JSON.
fn documented_site_overlay() -> Value {
    let doc = std::fs::read_to_string(repo_root().join("docs/kubernetes.md")).unwrap();
    let block = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains(IMAGE_PLACEHOLDER) && b.contains("newName:"))
        .expect("docs/kubernetes.md has no site overlay block");
    serde_yaml_ng::from_str(block).expect("the site overlay block is YAML")
}

/// [`write_site_dir`] of `site` with its one resource the overlay `dir`.
fn write_site(mut site: Value, dir: &str, tag: &str) -> PathBuf {
    site["resources"] = serde_json::json!([format!("../gpuslice/packaging/kubernetes/{dir}")]);
    write_site_dir(&site, &format!("{tag}-{}", dir.replace('/', "-")))
}

#[test]
fn the_documented_site_overlay_sets_every_container_of_every_mode() {
    let Some(kubectl) = kubectl_or_skip("site overlay") else {
        return;
    };
    let site = documented_site_overlay();
    let res = site["resources"].as_array().expect("resources");
    assert_eq!(res.len(), 1, "{res:?}");
    assert_eq!(res[0], "../gpuslice/packaging/kubernetes/overlays/dra");
    let images = site["images"].as_array().expect("images");
    assert_eq!(images.len(), 1, "one place: {images:?}");
    assert_eq!(images[0]["name"], IMAGE_PLACEHOLDER);
    assert_eq!(images[0]["newName"], "REGISTRY/gpuslice");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        images[0]["newTag"], version,
        "the docs' tag is not the release"
    );
    let mut set = site.clone();
    set["images"][0]["newName"] = SITE_IMAGE.into();
    let want = format!("{SITE_IMAGE}:{version}");
    for dir in AGENT_DIRS {
        let objs = render_site(&kubectl, &write_site(set.clone(), dir, "set"));
        assert!(unset_images(&objs).is_empty(), "{dir}");
        for (at, image) in container_images(&objs) {
            assert_eq!(image, want, "{dir}: {at}");
        }
    }
    // Without the entry, the check sees the placeholder in every container.
    let mut unset = site;
    unset.as_object_mut().unwrap().remove("images");
    let objs = render_site(&kubectl, &write_site(unset, "overlays/dra", "unset"));
    assert_eq!(unset_images(&objs).len(), container_images(&objs).len());
}

/// Every `kubectl apply -k DIR` of `text` (a page named `name`), as (name:line, DIR).
fn applies_in(name: &str, text: &str) -> Vec<(String, String)> {
    const CMD: &str = "kubectl apply -k ";
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, _) in line.match_indices(CMD) {
            let arg: String = line[i + CMD.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-_./".contains(*c))
                .collect();
            out.push((format!("{name}:{}", n + 1), arg));
        }
    }
    out
}

/// [`applies_in`] over README.md and docs/*.md.
fn documented_applies() -> Vec<(String, String)> {
    let mut files = vec![repo_root().join("README.md")];
    for e in std::fs::read_dir(repo_root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut out = Vec::new();
    for f in files {
        let name = f
            .strip_prefix(repo_root())
            .unwrap_or(&f)
            .display()
            .to_string();
        out.extend(applies_in(&name, &std::fs::read_to_string(&f).unwrap()));
    }
    out
}

#[test]
fn the_apply_scan_finds_commands_in_blocks_and_prose() {
    let page = "```sh\nkubectl apply -k packaging/kubernetes/overlays/dra   # the mode\n```\n\
                Then `kubectl apply -k my-gpuslice`, or `kubectl apply -k ../x/`.\n";
    assert_eq!(
        applies_in("p.md", page),
        [
            (
                "p.md:2".to_string(),
                "packaging/kubernetes/overlays/dra".to_string()
            ),
            ("p.md:4".to_string(), "my-gpuslice".to_string()),
            ("p.md:4".to_string(), "../x/".to_string()),
        ]
    );
}

#[test]
fn no_documented_apply_applies_the_placeholder() {
    let Some(kubectl) = kubectl_or_skip("documented applies") else {
        return;
    };
    let applies = documented_applies();
    assert!(applies.len() >= 4, "{applies:?}");
    let mut rendered = 0;
    for (at, dir) in &applies {
        // Directories of the repository; the site overlay (my-gpuslice) is the reader's own.
        let Some(rel) = dir.strip_prefix("packaging/kubernetes/") else {
            assert!(!dir.contains("packaging"), "{at}: {dir}");
            continue;
        };
        let objs =
            render(&kubectl, &kubernetes_dir().join(rel)).unwrap_or_else(|e| panic!("{at}: {e}"));
        rendered += 1;
        let unset = unset_images(&objs);
        assert!(
            unset.is_empty(),
            "{at}: `kubectl apply -k {dir}` would run the placeholder image: {unset:?}"
        );
    }
    assert!(rendered >= 2, "{applies:?}");
}
