//! `cargo xtask image`: the node image (packaging/kubernetes) as an OCI image archive, without a
//! container engine or daemon: a base image's OCI layout (any glibc image with `sh`, `cp`,
//! `cmp`, `ln` and `nsenter`, e.g. Debian bookworm-slim, copied to a layout directory with
//! `skopeo copy docker://… oci:DIR` or `crane pull --format=oci`) plus one uncompressed layer
//! with the dist tree's `usr/bin` and `usr/lib/gpuslice` — what `image/Containerfile` builds.
//! The archive (`oci-layout`, `index.json`, `blobs/sha256/…`) is what `ctr image import`,
//! `podman load` and `skopeo copy oci-archive:` read. Deterministic: files sorted, owner root,
//! time 0, no timestamps in the config.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Media types written.
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
/// The dist directories the image carries (the Containerfile's two COPY lines).
const DIRS: [&str; 2] = ["usr/bin", "usr/lib/gpuslice"];

/// What to build.
pub struct Options {
    /// The base image's OCI layout directory.
    pub base: PathBuf,
    /// The dist tree (`cargo xtask dist`).
    pub dist: PathBuf,
    /// The archive to write.
    pub out: PathBuf,
    /// `org.opencontainers.image.ref.name` in the archive's index (e.g. `0.1.0`).
    pub tag: String,
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The blobs of the new layout: digest (`sha256:…`) → content.
type Blobs = BTreeMap<String, Vec<u8>>;

fn add_blob(blobs: &mut Blobs, data: Vec<u8>) -> (String, usize) {
    let digest = format!("sha256:{}", sha256_hex(&data));
    let size = data.len();
    blobs.insert(digest.clone(), data);
    (digest, size)
}

fn read_blob(layout: &Path, digest: &str) -> Result<Vec<u8>> {
    let hex = digest
        .strip_prefix("sha256:")
        .with_context(|| format!("{digest}: not a sha256 digest"))?;
    let path = layout.join("blobs/sha256").join(hex);
    let data = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    if sha256_hex(&data) != hex {
        bail!("{}: content does not match its digest", path.display());
    }
    Ok(data)
}

fn json_blob(layout: &Path, digest: &str) -> Result<Value> {
    serde_json::from_slice(&read_blob(layout, digest)?)
        .with_context(|| format!("blob {digest} is not JSON"))
}

/// The base layout's image manifest for this machine (an index is followed to its
/// `linux/<arch>` entry).
fn base_manifest(layout: &Path) -> Result<Value> {
    let index: Value = serde_json::from_slice(
        &fs::read(layout.join("index.json"))
            .with_context(|| format!("{}: no index.json (not an OCI layout)", layout.display()))?,
    )
    .context("index.json is not JSON")?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        a => a,
    };
    let mut desc = index["manifests"]
        .get(0)
        .cloned()
        .context("index.json lists no manifest")?;
    for _ in 0..2 {
        let doc = json_blob(layout, desc["digest"].as_str().unwrap_or_default())?;
        if doc["manifests"].is_array() {
            desc = doc["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == arch)
                .cloned()
                .with_context(|| format!("the base index has no linux/{arch} image"))?;
            continue;
        }
        if !doc["layers"].is_array() {
            bail!("base manifest {} has no layers", desc["digest"]);
        }
        return Ok(doc);
    }
    bail!("the base index nests more than one level")
}

/// One ustar header block for `name` (a directory when `len` is `None`).
fn tar_header(name: &str, len: Option<u64>, mode: u32) -> Result<[u8; 512]> {
    let mut h = [0u8; 512];
    let bytes = name.as_bytes();
    if bytes.len() > 100 {
        bail!("{name}: path longer than 100 bytes");
    }
    h[..bytes.len()].copy_from_slice(bytes);
    let octal = |h: &mut [u8; 512], at: usize, width: usize, v: u64| {
        let s = format!("{v:0w$o}\0", w = width - 1);
        h[at..at + width].copy_from_slice(s.as_bytes());
    };
    octal(&mut h, 100, 8, u64::from(mode));
    octal(&mut h, 108, 8, 0); // uid
    octal(&mut h, 116, 8, 0); // gid
    octal(&mut h, 124, 12, len.unwrap_or(0));
    octal(&mut h, 136, 12, 0); // mtime
    h[156] = if len.is_some() { b'0' } else { b'5' };
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    octal(&mut h, 148, 7, sum);
    h[155] = b' ';
    Ok(h)
}

/// A tar of `entries` (path, content or `None` for a directory, mode), in order.
pub fn tar(entries: &[(String, Option<Vec<u8>>, u32)]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (name, data, mode) in entries {
        out.extend_from_slice(&tar_header(
            name,
            data.as_ref().map(|d| d.len() as u64),
            *mode,
        )?);
        if let Some(d) = data {
            out.extend_from_slice(d);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
    }
    out.resize(out.len() + 1024, 0);
    Ok(out)
}

/// The layer: the parent directories, then every file of [`DIRS`] under `dist`, sorted, with
/// its permission bits.
fn dist_layer(dist: &Path) -> Result<Vec<u8>> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries = vec![
        ("usr/".to_string(), None, 0o755),
        ("usr/lib/".to_string(), None, 0o755),
    ];
    for dir in DIRS {
        let abs = dist.join(dir);
        let mut names: Vec<_> = fs::read_dir(&abs)
            .with_context(|| format!("{}: not a dist tree (cargo xtask dist)", abs.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        names.sort();
        entries.push((format!("{dir}/"), None, 0o755));
        for p in names.iter().filter(|p| p.is_file()) {
            let mode = fs::metadata(p)?.permissions().mode() & 0o7777;
            let name = format!("{dir}/{}", p.file_name().unwrap().to_string_lossy());
            entries.push((name, Some(fs::read(p)?), mode));
        }
    }
    tar(&entries)
}

/// Builds the archive; returns the new manifest's digest.
pub fn build(o: &Options) -> Result<String> {
    let manifest = base_manifest(&o.base)?;
    let mut blobs = Blobs::new();
    for d in manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain([&manifest["config"]])
    {
        let digest = d["digest"].as_str().context("descriptor without digest")?;
        blobs.insert(digest.to_string(), read_blob(&o.base, digest)?);
    }
    let mut config = json_blob(&o.base, manifest["config"]["digest"].as_str().unwrap_or(""))?;
    let (layer, layer_size) = add_blob(&mut blobs, dist_layer(&o.dist)?);
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .context("base config has no rootfs.diff_ids")?
        .push(json!(layer));
    config["config"]["Entrypoint"] = json!(["/usr/bin/gpuslice-arbiter"]);
    config["config"]["Cmd"] = Value::Null;
    if let Some(h) = config["history"].as_array_mut() {
        h.push(json!({"created_by": "cargo xtask image: dist usr/bin, usr/lib/gpuslice"}));
    }
    let (config_digest, config_size) = add_blob(&mut blobs, serde_json::to_vec(&config)?);
    let mut m = manifest.clone();
    m["mediaType"] = json!(MANIFEST);
    m["config"] = json!({"mediaType": "application/vnd.oci.image.config.v1+json",
                         "digest": config_digest, "size": config_size});
    m["layers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"mediaType": LAYER, "digest": layer, "size": layer_size}));
    let (manifest_digest, manifest_size) = add_blob(&mut blobs, serde_json::to_vec(&m)?);
    let index = json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": [{
        "mediaType": MANIFEST, "digest": manifest_digest, "size": manifest_size,
        "annotations": {"org.opencontainers.image.ref.name": o.tag}}]});
    let mut entries = vec![
        (
            "oci-layout".to_string(),
            Some(br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
            0o644,
        ),
        (
            "index.json".to_string(),
            Some(serde_json::to_vec(&index)?),
            0o644,
        ),
        ("blobs/".to_string(), None, 0o755),
        ("blobs/sha256/".to_string(), None, 0o755),
    ];
    for (digest, data) in blobs {
        let hex = digest.trim_start_matches("sha256:");
        entries.push((format!("blobs/sha256/{hex}"), Some(data), 0o644));
    }
    if let Some(dir) = o.out.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&o.out, tar(&entries)?).with_context(|| format!("writing {}", o.out.display()))?;
    Ok(manifest_digest)
}

/// `cargo xtask image`.
pub fn run(o: &Options) -> Result<()> {
    let digest = build(o)?;
    eprintln!(
        "wrote {} (manifest {digest}, ref {}): ctr -n k8s.io image import, podman load, or \
         skopeo copy oci-archive:{}:{} docker://REGISTRY/gpuslice:{}",
        o.out.display(),
        o.tag,
        o.out.display(),
        o.tag,
        o.tag
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("gs-xtask-image-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        p
    }

    /// `tar -tv` of an archive by the system's tar (which checks every header's checksum).
    fn listing(archive: &Path) -> String {
        let out = Command::new("tar")
            .arg("-tvf")
            .arg(archive)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn put(layout: &Path, data: &[u8]) -> Value {
        let hex = sha256_hex(data);
        fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
        fs::write(layout.join("blobs/sha256").join(&hex), data).unwrap();
        json!({"digest": format!("sha256:{hex}"), "size": data.len()})
    }

    /// A base layout as skopeo writes one: index -> (index ->) manifest -> config + one layer.
    fn base(dir: &Path, nested: bool) {
        let layer = tar(&[
            ("bin/".into(), None, 0o755),
            ("bin/sh".into(), Some(b"sh".to_vec()), 0o755),
        ])
        .unwrap();
        let mut layer_d = put(dir, &layer);
        layer_d["mediaType"] = json!(LAYER);
        let config = json!({"architecture": "amd64", "os": "linux",
            "config": {"Cmd": ["bash"]}, "rootfs": {"type": "layers",
            "diff_ids": [layer_d["digest"]]}, "history": [{"created_by": "base"}]});
        let config_d = put(dir, &serde_json::to_vec(&config).unwrap());
        let manifest = json!({"schemaVersion": 2, "mediaType": MANIFEST,
            "config": config_d, "layers": [layer_d]});
        let mut m = put(dir, &serde_json::to_vec(&manifest).unwrap());
        m["mediaType"] = json!(MANIFEST);
        let arch = if cfg!(target_arch = "aarch64") {
            "arm64"
        } else {
            "amd64"
        };
        m["platform"] = json!({"os": "linux", "architecture": arch});
        let top = if nested {
            let other = json!({"digest": format!("sha256:{}", "0".repeat(64)), "size": 1,
                "platform": {"os": "linux", "architecture": "s390x"}});
            let inner = json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": [other, m]});
            put(dir, &serde_json::to_vec(&inner).unwrap())
        } else {
            m
        };
        let index = json!({"schemaVersion": 2, "manifests": [top]});
        fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
        fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    }

    fn dist(dir: &Path) {
        for (p, mode) in [
            ("usr/bin/gpuslice-arbiter", 0o755),
            ("usr/bin/gpuslice", 0o755),
            ("usr/lib/gpuslice/libgpuslice.so", 0o644),
        ] {
            let f = dir.join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(&f, p.as_bytes()).unwrap();
            fs::set_permissions(&f, fs::Permissions::from_mode(mode)).unwrap();
        }
    }

    #[test]
    fn tar_headers_are_read_by_the_system_tar() {
        let dir = tmp("tar");
        let t = tar(&[
            ("a/".into(), None, 0o755),
            ("a/x".into(), Some(vec![7; 600]), 0o750),
        ])
        .unwrap();
        assert_eq!(t.len() % 512, 0);
        fs::write(dir.join("t.tar"), &t).unwrap();
        let l = listing(&dir.join("t.tar"));
        assert!(l.contains("drwxr-xr-x 0/0") && l.contains("a/\n"), "{l}");
        assert!(
            l.contains("-rwxr-x--- 0/0") && l.contains("600 1970-01-01") && l.contains("a/x"),
            "{l}"
        );
        assert!(tar(&[("x".repeat(101), None, 0)])
            .unwrap_err()
            .to_string()
            .contains("longer"));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_archive_is_the_base_plus_the_dist_layer_and_is_reproducible() {
        for nested in [false, true] {
            let dir = tmp(if nested { "nested" } else { "flat" });
            base(&dir.join("base"), nested);
            dist(&dir.join("dist"));
            let o = Options {
                base: dir.join("base"),
                dist: dir.join("dist"),
                out: dir.join("out/image.tar"),
                tag: "0.1.0".into(),
            };
            let digest = build(&o).unwrap();
            let first = fs::read(&o.out).unwrap();
            build(&o).unwrap();
            assert_eq!(fs::read(&o.out).unwrap(), first, "not reproducible");
            // Unpack with the system tar and follow the layout from index.json.
            let x = dir.join("x");
            fs::create_dir_all(&x).unwrap();
            let st = Command::new("tar")
                .arg("-xf")
                .arg(&o.out)
                .arg("-C")
                .arg(&x)
                .status();
            assert!(st.unwrap().success());
            assert!(x.join("oci-layout").is_file());
            let index: Value =
                serde_json::from_slice(&fs::read(x.join("index.json")).unwrap()).unwrap();
            let m = &index["manifests"][0];
            assert_eq!(m["digest"], digest.as_str());
            assert_eq!(
                m["annotations"]["org.opencontainers.image.ref.name"],
                "0.1.0"
            );
            // read_blob checks every digest against the content.
            let manifest = json_blob(&x, &digest).unwrap();
            let layers = manifest["layers"].as_array().unwrap();
            assert_eq!(layers.len(), 2);
            let config = json_blob(&x, manifest["config"]["digest"].as_str().unwrap()).unwrap();
            let diff_ids: Vec<&Value> = config["rootfs"]["diff_ids"]
                .as_array()
                .unwrap()
                .iter()
                .collect();
            assert_eq!(diff_ids, [&layers[0]["digest"], &layers[1]["digest"]]);
            assert_eq!(
                config["config"]["Entrypoint"],
                json!(["/usr/bin/gpuslice-arbiter"])
            );
            assert!(config["config"]["Cmd"].is_null());
            let new = layers[1]["digest"].as_str().unwrap();
            read_blob(&x, new).unwrap();
            let l = listing(
                &x.join("blobs/sha256")
                    .join(new.trim_start_matches("sha256:")),
            );
            for line in [
                "-rwxr-xr-x 0/0",
                "usr/bin/gpuslice-arbiter",
                "-rw-r--r-- 0/0",
                "usr/lib/gpuslice/libgpuslice.so",
            ] {
                assert!(l.contains(line), "{line}: {l}");
            }
            fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_bad_base_or_dist_is_named() {
        let dir = tmp("bad");
        dist(&dir.join("dist"));
        let mut o = Options {
            base: dir.join("nothing"),
            dist: dir.join("dist"),
            out: dir.join("image.tar"),
            tag: "t".into(),
        };
        let e = format!("{:#}", build(&o).unwrap_err());
        assert!(e.contains("no index.json (not an OCI layout)"), "{e}");
        base(&dir.join("base"), false);
        o.base = dir.join("base");
        // A blob whose content was changed.
        let blobs = dir.join("base/blobs/sha256");
        let victim = fs::read_dir(&blobs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let good = fs::read(&victim).unwrap();
        fs::write(&victim, b"tampered").unwrap();
        let e = format!("{:#}", build(&o).unwrap_err());
        assert!(e.contains("does not match its digest"), "{e}");
        fs::write(&victim, good).unwrap();
        o.dist = dir.join("no-dist");
        let e = format!("{:#}", build(&o).unwrap_err());
        assert!(e.contains("not a dist tree"), "{e}");
        assert!(!o.out.exists());
        fs::remove_dir_all(dir).unwrap();
    }
}
