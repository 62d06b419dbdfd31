//! Options → requests. The values are parsed by the api crate's request parser (the same code
//! that reads `gpuslice.io/*` annotations), and its errors are re-labelled with the option that
//! carried the value: `--memory="12Q": unknown unit "Q" (…)`.

use std::collections::BTreeMap;

use gpuslice_api::request::keys;
use gpuslice_api::{MemoryRequest, Priority, Request, SliceRequest};

use crate::args::{RequestArgs, RunArgs};

/// A value given on the command line is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}=\"{value}\": {reason}")]
pub struct OptionError {
    /// `--memory`, `--compute`, …
    pub option: String,
    /// The value as given.
    pub value: String,
    /// Why it is wrong.
    pub reason: String,
}

const OPTIONS: [(&str, &str); 6] = [
    (keys::MEMORY, "--memory"),
    (keys::COMPUTE, "--compute"),
    (keys::COMPUTE_LIMIT, "--compute-limit"),
    (keys::PRIORITY, "--priority"),
    (keys::DEVICES, "--devices"),
    (keys::MODEL, "--model"),
];

fn option_of(key: &str) -> &str {
    OPTIONS
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(key, |(_, o)| o)
}

fn relabel(text: &str) -> String {
    let mut out = text.to_string();
    // Longest keys first so `compute-limit` is not cut by `compute`.
    let mut pairs = OPTIONS;
    pairs.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    for (k, o) in pairs {
        out = out.replace(k, o);
    }
    out
}

fn parse(pairs: &[(&str, &Option<String>)]) -> Result<SliceRequest, OptionError> {
    let mut ann = BTreeMap::new();
    for (key, value) in pairs {
        if let Some(v) = value {
            ann.insert(key.to_string(), v.clone());
        }
    }
    match SliceRequest::from_sources(&ann, &[]) {
        Ok(r) => Ok(r.unwrap_or_default()),
        Err(e) => Err(OptionError {
            option: option_of(&e.key).to_string(),
            value: e.value,
            reason: relabel(&e.reason),
        }),
    }
}

/// The request of `gpuslice run`.
pub fn slice_request(args: &RunArgs) -> Result<SliceRequest, OptionError> {
    let r = &args.request;
    parse(&[
        (keys::MEMORY, &r.memory),
        (keys::COMPUTE, &r.compute),
        (keys::COMPUTE_LIMIT, &r.compute_limit),
        (keys::PRIORITY, &r.priority),
        (keys::DEVICES, &args.devices),
        (keys::MODEL, &args.model),
    ])
}

/// The `update` request for `slice`. `--compute 0` (or `none`) removes the guarantee. At least
/// one change must be given.
pub fn update_request(slice: &str, r: &RequestArgs) -> Result<Request, OptionError> {
    let best_effort = r
        .compute
        .as_deref()
        .is_some_and(|c| matches!(c.trim(), "0" | "0%" | "none"));
    let compute = if best_effort { None } else { r.compute.clone() };
    let parsed = parse(&[
        (keys::MEMORY, &r.memory),
        (keys::COMPUTE, &compute),
        (keys::COMPUTE_LIMIT, &r.compute_limit),
        (keys::PRIORITY, &r.priority),
    ])?;
    if r.memory.is_none()
        && r.compute.is_none()
        && r.compute_limit.is_none()
        && r.priority.is_none()
    {
        return Err(OptionError {
            option: "update".into(),
            value: slice.into(),
            reason: "nothing to change (give --memory, --compute, --compute-limit or --priority)"
                .into(),
        });
    }
    let memory: Option<MemoryRequest> = parsed.memory;
    let priority: Option<Priority> = r.priority.as_ref().map(|_| parsed.priority);
    Ok(Request::Update {
        slice_id: slice.to_string(),
        memory,
        compute: if best_effort { Some(0) } else { parsed.compute },
        compute_limit: parsed.compute_limit,
        priority,
    })
}
