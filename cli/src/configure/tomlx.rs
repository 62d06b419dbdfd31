//! Small `toml_edit` helpers shared by the containerd and CRI-O editors: parse with an error
//! that names the line, walk to a table creating implicit parents, set a value only when it
//! differs (so formatting and comments of unchanged values survive).

use std::path::Path;

use toml_edit::{Array, DocumentMut, Item, Table, Value};

use super::ConfigureError;

/// Parses `text` (from `path`) or names the line and column of the error.
pub fn parse(path: &Path, text: &str) -> Result<DocumentMut, ConfigureError> {
    text.parse::<DocumentMut>().map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        ConfigureError::parse_at(path, text, at, e.message())
    })
}

/// The table at `keys` under `root`, created (implicit, so no empty header is printed) where
/// missing. A non-table on the way is refused.
pub fn table_at<'a>(
    root: &'a mut Table,
    keys: &[&str],
    path: &Path,
) -> Result<&'a mut Table, ConfigureError> {
    let mut t = root;
    let mut walked = Vec::new();
    for k in keys {
        walked.push(*k);
        if !t.contains_key(k) {
            let mut n = Table::new();
            n.set_implicit(true);
            t.insert(k, Item::Table(n));
        }
        let item = t.get_mut(k).ok_or_else(|| unsupported(path, &walked))?;
        if let Item::Value(Value::InlineTable(_)) = item {
            let inline = std::mem::take(item);
            if let Item::Value(Value::InlineTable(it)) = inline {
                *item = Item::Table(it.into_table());
            }
        }
        t = match item {
            Item::Table(t) => t,
            _ => return Err(unsupported(path, &walked)),
        };
    }
    Ok(t)
}

/// The table at `keys`, if every step exists and is a table.
pub fn get_table<'a>(root: &'a Table, keys: &[&str]) -> Option<&'a Table> {
    let mut t = root;
    for k in keys {
        t = t.get(k)?.as_table()?;
    }
    Some(t)
}

fn unsupported(path: &Path, keys: &[&str]) -> ConfigureError {
    ConfigureError::Unsupported {
        path: path.to_path_buf(),
        message: format!("`{}` is not a table", keys.join(".")),
    }
}

/// Inserts `key`; a new key is indented like the table's other keys, an existing one keeps
/// its place and comments.
pub fn insert_aligned(t: &mut Table, key: &str, item: Item) {
    if let Some(slot) = t.get_mut(key) {
        let decor = slot.as_value().map(|v| v.decor().clone());
        *slot = item;
        if let (Some(d), Some(v)) = (decor, slot.as_value_mut()) {
            *v.decor_mut() = d;
        }
        return;
    }
    let indent = key_indent(t);
    t.insert(key, item);
    if let (Some(ind), Some(mut km)) = (indent, t.key_mut(key)) {
        km.leaf_decor_mut().set_prefix(ind);
    }
}

/// Sets `key` to a string unless it already has that value.
pub fn set_str(t: &mut Table, key: &str, v: &str) {
    if t.get(key).and_then(Item::as_str) != Some(v) {
        insert_aligned(t, key, toml_edit::value(v));
    }
}

/// Sets `key` to a boolean unless it already has that value.
pub fn set_bool(t: &mut Table, key: &str, v: bool) {
    if t.get(key).and_then(Item::as_bool) != Some(v) {
        insert_aligned(t, key, toml_edit::value(v));
    }
}

/// Makes the string array `key` contain each of `wanted` (appended, existing order kept).
pub fn ensure_in_array(t: &mut Table, key: &str, wanted: &[&str]) {
    let mut arr = match t.get(key).and_then(Item::as_array) {
        Some(a) => a.clone(),
        None => Array::new(),
    };
    let mut changed = !t.contains_key(key);
    for w in wanted {
        if !arr.iter().any(|v| v.as_str() == Some(w)) {
            arr.push(*w);
            changed = true;
        }
    }
    if changed {
        insert_aligned(t, key, Item::Value(Value::Array(arr)));
    }
}

/// Copies the entries of `from` that `to` lacks (values and sub-tables, with their comments),
/// except `skip`.
pub fn copy_missing(from: &Table, to: &mut Table, skip: &[&str]) {
    for (k, _) in from.iter() {
        if skip.contains(&k) || to.contains_key(k) {
            continue;
        }
        if let Some((key, v)) = from.get_key_value(k) {
            let mut item = v.clone();
            if let Item::Table(t) = &mut item {
                forget_positions(t);
            }
            to.insert_formatted(key, item);
        }
    }
}

/// A copy of `t` (and its sub-tables) without document positions: a table with no position is
/// printed after the table printed before it, so copies follow their new parent.
pub fn forget_positions(t: &mut Table) {
    let mut n = Table::new();
    n.set_implicit(t.is_implicit());
    n.set_dotted(t.is_dotted());
    *n.decor_mut() = t.decor().clone();
    for (k, _) in t.iter() {
        if let Some((key, v)) = t.get_key_value(k) {
            let mut item = v.clone();
            if let Item::Table(sub) = &mut item {
                forget_positions(sub);
            }
            n.insert_formatted(key, item);
        }
    }
    *t = n;
}

/// The whitespace before the first key of `t` that has an explicit prefix (its indentation).
pub fn key_indent(t: &Table) -> Option<String> {
    t.iter().find_map(|(k, _)| {
        let (key, _) = t.get_key_value(k)?;
        let p = key.leaf_decor().prefix()?.as_str()?;
        let last = p.rsplit('\n').next().unwrap_or(p);
        (!last.is_empty() && last.trim().is_empty()).then(|| last.to_string())
    })
}

/// Gives every key of `t` without an explicit prefix the prefix `indent`, so added keys line
/// up with copied ones.
pub fn indent_new_keys(t: &mut Table, indent: &str) {
    let keys: Vec<String> = t.iter().map(|(k, _)| k.to_string()).collect();
    for k in keys {
        if let Some(mut km) = t.key_mut(&k) {
            if km.leaf_decor_mut().prefix().is_none() {
                km.leaf_decor_mut().set_prefix(indent.to_string());
            }
        }
    }
}
