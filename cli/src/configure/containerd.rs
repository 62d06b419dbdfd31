//! `gpuslice configure containerd`: a `gpuslice` CRI runtime class in containerd's config,
//! versions 1, 2 and 3 (the CRI plugin's key differs per version). Versions 2 and 3 get a
//! drop-in file listed in `imports` (the main file gains only that line); version 1 (no
//! `imports`) and `--in-place` edit the main file. What the drop-in carries depends on the
//! containerd series ([`Merge`], [`super::ctd_imports`]): for 1.x, which replaces a plugin's
//! table with the imported one, the CRI table as loaded before the drop-in (main file and
//! earlier imports such as NVIDIA's toolkit drop-in) plus the class; for 2.x, which merges key
//! by key, only the class and the keys gpuslice sets.

use std::path::Path;

use toml_edit::{DocumentMut, Item, Table};

use super::ctd_imports::{self, Merge};
use super::tomlx::{self, copy_missing, ensure_in_array, get_table, set_bool, set_str, table_at};
use super::{read_optional, ConfigureError, FileChange};

pub use super::ctd_config::{
    cri_keys, default_drop_in, glob_match, version_of, Options, Style, CLASS,
};

/// The annotation pass-through the class needs (Pod annotations reach the runtime).
pub const POD_ANNOTATIONS: &str = "gpuslice.io/*";
/// `runtime_type` of the gpuslice shim.
pub const SHIM_TYPE: &str = "io.containerd.gpuslice.v2";
/// `runtime_type` of runc's shim.
pub const RUNC_TYPE: &str = "io.containerd.runc.v2";
/// `cdi_spec_dirs` written with `--enable-cdi` when none are set.
pub const CDI_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];
/// The first line of the drop-in.
pub const DROP_IN_HEADER: &str = "# Written by `gpuslice configure containerd` for containerd 1.x: the CRI plugin table as\n# containerd loads it before this file (the main config and every earlier import, e.g. NVIDIA's\n# toolkit drop-in), copied because containerd 1.x replaces a plugin table from an import instead\n# of merging it, plus the gpuslice runtime class. Edit those files and run the command again.\n";
/// The first lines of the drop-in for containerd 2.x, which merges imported tables key by key.
pub const DROP_IN_HEADER_DEEP: &str = "# Written by `gpuslice configure containerd` for containerd 2.x (which merges imported plugin\n# tables key by key): only the gpuslice runtime class and the keys gpuslice sets.\n";

/// The files to write (each with its current and wanted text).
pub fn plan(opts: &Options) -> Result<Vec<FileChange>, ConfigureError> {
    let path = &opts.config;
    let old = read_optional(path)?;
    let text = old.clone().unwrap_or_default();
    let mut doc = tomlx::parse(path, &text)?;
    if old.is_none() {
        doc.insert("version", toml_edit::value(opts.new_version));
    }
    let version = version_of(&doc, path)?;
    let keys = cri_keys(version).unwrap_or(["plugins", "cri"]);
    if version == 1 || opts.in_place {
        let cri = table_at(doc.as_table_mut(), &keys, path)?;
        edit_cri(cri, opts, path)?;
        return Ok(vec![FileChange {
            path: path.clone(),
            old,
            new: doc.to_string(),
        }]);
    }
    let drop_in = std::path::absolute(
        opts.drop_in
            .clone()
            .unwrap_or_else(|| default_drop_in(path)),
    )
    .map_err(|e| ConfigureError::io(path, e))?;
    add_import(&mut doc, path, &drop_in)?;
    let old_drop = read_optional(&drop_in)?;
    let previous_class = match &old_drop {
        Some(t) => {
            let d = tomlx::parse(&drop_in, t)?;
            get_table(d.as_table(), &keys)
                .and_then(|c| get_table(c, &["containerd", "runtimes", CLASS]))
                .cloned()
        }
        None => None,
    };
    let merge = Merge::for_config(version, opts.series);
    let loaded = cri_before_drop_in(&mut doc, path, &drop_in, merge)?;
    let main_change = FileChange {
        path: path.clone(),
        old,
        new: doc.to_string(),
    };
    let new_drop = render_drop_in(&doc, loaded, previous_class, opts, &drop_in, merge)?;
    Ok(vec![
        main_change,
        FileChange {
            path: drop_in,
            old: old_drop,
            new: new_drop,
        },
    ])
}

/// The CRI table containerd loads before the drop-in. Under containerd 1.x's rule the drop-in
/// must be the last file naming that table: when a file loaded after it does (NVIDIA's toolkit
/// adds `conf.d/*.toml` behind an `imports` entry naming our drop-in), the entry naming the
/// drop-in is moved to the end of `imports` (or dropped where a later glob covers it) once.
fn cri_before_drop_in(
    doc: &mut DocumentMut,
    path: &Path,
    drop_in: &Path,
    merge: Merge,
) -> Result<Option<Table>, ConfigureError> {
    let main_abs = std::path::absolute(path).map_err(|e| ConfigureError::io(path, e))?;
    let order = ctd_imports::load_order(&main_abs, doc, drop_in)?;
    let first = ctd_imports::cri_before_ours(&order, drop_in, merge);
    if first.is_ok() || merge == Merge::Deep {
        return first;
    }
    super::ctd_remove::remove_import(doc, path, drop_in);
    add_import(doc, path, drop_in)?;
    let order = ctd_imports::load_order(&main_abs, doc, drop_in)?;
    ctd_imports::cri_before_ours(&order, drop_in, merge)
}

/// The drop-in's text: under [`Merge::Replace`] the CRI table containerd has before it plus
/// the class; under [`Merge::Deep`] only what gpuslice adds to that table.
fn render_drop_in(
    main: &DocumentMut,
    loaded: Option<Table>,
    previous_class: Option<Table>,
    opts: &Options,
    drop_in: &Path,
    merge: Merge,
) -> Result<String, ConfigureError> {
    let version = version_of(main, &opts.config)?;
    let keys = cri_keys(version).unwrap_or(["plugins", "cri"]);
    let mut out = DocumentMut::new();
    out.insert("version", toml_edit::value(version));
    let mut plugins = Table::new();
    plugins.set_implicit(true);
    // The key spelled as in the main file, where it has one.
    let key = main
        .get("plugins")
        .and_then(Item::as_table)
        .and_then(|p| p.get_key_value(keys[1]))
        .map_or_else(|| toml_edit::Key::new(keys[1]), |(k, _)| k.clone());
    let mut cri = loaded.unwrap_or_default();
    tomlx::forget_positions(&mut cri);
    cri.set_implicit(true);
    let before = cri.clone();
    if let Some(mut prev) = previous_class {
        tomlx::forget_positions(&mut prev);
        let default_name = get_table(&cri, &["containerd"]).and_then(default_runtime_name);
        let runtimes = table_at(&mut cri, &["containerd", "runtimes"], drop_in)?;
        // Same order as a first run: the built-in class before ours.
        keep_builtin_default(runtimes, default_name.as_deref());
        runtimes.insert(CLASS, Item::Table(prev));
    }
    edit_cri(&mut cri, opts, drop_in)?;
    if merge == Merge::Deep {
        cri = only_added(&before, &cri, opts, drop_in)?;
    }
    let prefix = cri.decor().prefix().and_then(|p| p.as_str()).unwrap_or("");
    if !prefix.starts_with('\n') {
        let p = format!("\n{prefix}");
        cri.decor_mut().set_prefix(p);
    }
    plugins.insert_formatted(&key, Item::Table(cri));
    out.insert("plugins", Item::Table(plugins));
    let header = match merge {
        Merge::Replace => DROP_IN_HEADER,
        Merge::Deep => DROP_IN_HEADER_DEEP,
    };
    let mut text = format!("{header}{out}");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// What gpuslice added to the CRI table `before` (containerd 2.x merges the rest itself): the
/// class, the built-in `runc` class where it was written out, the default runtime and CDI keys
/// when asked for.
fn only_added(
    before: &Table,
    edited: &Table,
    opts: &Options,
    path: &Path,
) -> Result<Table, ConfigureError> {
    let mut out = Table::new();
    out.set_implicit(true);
    let runtimes = ["containerd", "runtimes"];
    let had = |name: &str| get_table(before, &runtimes).is_some_and(|r| r.contains_key(name));
    if let Some(edited_runtimes) = get_table(edited, &runtimes) {
        for name in [BUILTIN_DEFAULT, CLASS] {
            if name == CLASS || !had(name) {
                if let Some(class) = edited_runtimes.get(name) {
                    table_at(&mut out, &runtimes, path)?.insert(name, class.clone());
                }
            }
        }
    }
    if opts.default_runtime {
        set_str(
            table_at(&mut out, &["containerd"], path)?,
            "default_runtime_name",
            CLASS,
        );
    }
    if opts.enable_cdi {
        for k in ["enable_cdi", "cdi_spec_dirs"] {
            if let Some(v) = edited
                .get(k)
                .filter(|_| k == "enable_cdi" || !before.contains_key(k))
            {
                out.insert(k, v.clone());
            }
        }
    }
    Ok(out)
}

/// `imports` gains `drop_in` unless an entry (path or glob, relative to the config's
/// directory) already names it.
fn add_import(doc: &mut DocumentMut, path: &Path, drop_in: &Path) -> Result<(), ConfigureError> {
    let base = path.parent().unwrap_or(Path::new("/"));
    let wanted = drop_in.display().to_string();
    if let Some(item) = doc.get("imports") {
        let arr = item.as_array().ok_or_else(|| ConfigureError::Unsupported {
            path: path.to_path_buf(),
            message: "`imports` is not an array of strings".into(),
        })?;
        for v in arr.iter().filter_map(|v| v.as_str()) {
            let full = base.join(v).display().to_string();
            if glob_match(&full, &wanted) {
                return Ok(());
            }
        }
    }
    ensure_in_array(doc.as_table_mut(), "imports", &[&wanted]);
    Ok(())
}

/// The runtime class containerd defines by itself when a config names none: `runc`, on runc's
/// shim with every option at its zero value (what `containerd config dump` of 1.6, 1.7 and 2.1
/// shows for a config without a `runtimes` table; the sandbox mode left out is defaulted by
/// each version's own validation).
pub const BUILTIN_DEFAULT: &str = "runc";

/// A config that relies on the built-in `runc` class (its `runtimes` table lacks the default
/// runtime's name, `runc` when unset) loses it the moment `runtimes` gains any entry: the CRI
/// plugin decodes the table over its defaults and the map replaces the built-in one, so the
/// plugin fails with "no corresponding runtime configured in `containerd.runtimes`". Write the
/// built-in class out before adding ours. A default naming some other missing class was broken
/// before we came and is left as it is.
fn keep_builtin_default(runtimes: &mut Table, default_name: Option<&str>) {
    let name = default_name.unwrap_or(BUILTIN_DEFAULT);
    if name != BUILTIN_DEFAULT || runtimes.contains_key(name) {
        return;
    }
    let mut runc = Table::new();
    runc.insert("runtime_type", toml_edit::value(RUNC_TYPE));
    let mut options = Table::new();
    options.set_implicit(false);
    runc.insert("options", Item::Table(options));
    runtimes.insert(BUILTIN_DEFAULT, Item::Table(runc));
}

/// `default_runtime_name` of a CRI `containerd` table, unless it is ours.
fn default_runtime_name(containerd: &Table) -> Option<String> {
    containerd
        .get("default_runtime_name")
        .and_then(Item::as_str)
        .filter(|n| *n != CLASS)
        .map(str::to_string)
}

/// Adds or completes the class in a CRI plugin table; optional default runtime and CDI.
pub fn edit_cri(cri: &mut Table, opts: &Options, path: &Path) -> Result<(), ConfigureError> {
    if opts.enable_cdi {
        set_bool(cri, "enable_cdi", true);
        if !cri.contains_key("cdi_spec_dirs") {
            ensure_in_array(cri, "cdi_spec_dirs", &CDI_SPEC_DIRS);
        }
    }
    let containerd = table_at(cri, &["containerd"], path)?;
    // The class to copy: the default runtime's when it is a runc one, else `runc`.
    let source_name = default_runtime_name(containerd);
    if opts.default_runtime {
        set_str(containerd, "default_runtime_name", CLASS);
    }
    let runtimes = table_at(containerd, &["runtimes"], path)?;
    keep_builtin_default(runtimes, source_name.as_deref());
    let source = source_name
        .as_deref()
        .and_then(|n| runtimes.get(n))
        .and_then(Item::as_table)
        .filter(|t| t.get("runtime_type").and_then(Item::as_str) == Some(RUNC_TYPE))
        .or_else(|| runtimes.get("runc").and_then(Item::as_table))
        .cloned()
        .unwrap_or_default();
    let is_new = !runtimes.contains_key(CLASS);
    let class = table_at(runtimes, &[CLASS], path)?;
    class.set_implicit(false);
    if is_new {
        // Lay the new class out like the one it copies (header indentation and blank lines).
        *class.decor_mut() = source.decor().clone();
    }
    let runtime_type = match opts.style {
        Style::BinaryName => RUNC_TYPE,
        Style::Shim => SHIM_TYPE,
    };
    set_str(class, "runtime_type", runtime_type);
    copy_missing(
        &source,
        class,
        &["runtime_type", "runtime_path", "runtime_engine", "options"],
    );
    ensure_in_array(class, "pod_annotations", &[POD_ANNOTATIONS]);
    let class_indent = tomlx::key_indent(&source);
    if let Some(ind) = &class_indent {
        tomlx::indent_new_keys(class, ind);
    }
    let options_new = !class.contains_key("options");
    let options = table_at(class, &["options"], path)?;
    options.set_implicit(false);
    let runtime = opts.runtime_path.display().to_string();
    let empty = Table::new();
    let source_options = source
        .get("options")
        .and_then(Item::as_table)
        .unwrap_or(&empty);
    if options_new {
        if let Some(src) = source.get("options").and_then(Item::as_table) {
            *options.decor_mut() = src.decor().clone();
        }
    }
    match opts.style {
        Style::BinaryName => {
            copy_missing(source_options, options, &["BinaryName"]);
            set_str(options, "BinaryName", &runtime);
        }
        Style::Shim => {
            if options.get("BinaryName").and_then(Item::as_str) == Some(runtime.as_str()) {
                options.remove("BinaryName");
            }
            copy_missing(source_options, options, &[]);
        }
    }
    if let Some(ind) = tomlx::key_indent(source_options).or(class_indent) {
        tomlx::indent_new_keys(options, &ind);
    }
    Ok(())
}
