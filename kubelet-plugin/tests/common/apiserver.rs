//! API stand-in: NOT a Kubernetes API server. No kube-apiserver binary can be had on the machines
//! these tests run on, so this small HTTP/1 server on loopback implements only the REST calls the
//! plugin makes, the way the API server answers them:
//!
//! * `GET /api/v1/nodes/{name}` (the slices' owner)
//! * `GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}`
//! * `GET /apis/resource.k8s.io/v1/resourceslices?fieldSelector=…` (only `spec.nodeName` and
//!   `spec.driver`, the field labels the API server supports for ResourceSlices; any other is a
//!   400 as there), and with `watch=true` a watch from `resourceVersion` (the events after it,
//!   then live ones, one JSON object a line; `timeoutSeconds` is not honoured: it lasts until
//!   the client goes or the stand-in stops)
//! * `DELETE /apis/resource.k8s.io/v1/resourceslices?fieldSelector=…` (DeleteCollection, what a
//!   starting kubelet does to its node's slices: see `kubelet_restart`)
//! * `POST /apis/resource.k8s.io/v1/resourceslices`, `GET`/`PUT`/`DELETE
//!   /apis/resource.k8s.io/v1/resourceslices/{name}`
//!
//! Like the API server, it stores and returns capacity quantities in canonical form: plain
//! digits become the shortest decimal-SI text of the same value (`39321600000` →
//! `39321600k`, `1000` → `1k`), as `resource.Quantity` canonicalises them
//! (k8s.io/apimachinery/pkg/api/resource/quantity.go, `CanonicalizeBytes`).
//!
//! It is strict: a bearer token is required (401 otherwise); every ResourceSlice sent is
//! deserialised into `k8s-openapi`'s v1 type (feature v1_36) and serialised back (the deploy
//! suite's `strict::check`), and a field the type drops is a 400 (`fieldValidation=Strict`); the
//! object is then checked against the
//! documented ResourceSlice validation (`validate::resource_slice`: names, ≤ 128 devices,
//! attributes, capacity quantities and request policies) and the immutable fields
//! (`spec.driver`, `spec.nodeName`), 422 when wrong. A PUT or a DELETE precondition with a stale
//! `resourceVersion` is a 409 Conflict, a create of an existing name a 409 AlreadyExists, a
//! missing object a 404 — each with the API server's `Status` body. Stricter than the API server
//! (which validates each object alone): within one pool, slices of one generation must agree on
//! `resourceSliceCount`, and a pool's generation never goes down.
//!
//! Faults for tests: [`State::down`] (503 to everything), [`State::interfere`] (a concurrent
//! writer bumps a slice's resourceVersion before the next N PUTs / DELETEs), and stopping the
//! server ([`StandIn::stop`], connection refused).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use gpuslice_deploy_tests::strict;
use gpuslice_kubelet_plugin::dra::resourceslice::each_quantity;
use gpuslice_kubelet_plugin::dra::validate;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

/// The bearer token the stand-in accepts.
pub const TOKEN: &str = "standin-token";
const PREFIX: &str = "/apis/resource.k8s.io/v1";

/// What the stand-in holds and what tests may change.
#[derive(Debug, Default)]
pub struct State {
    /// ResourceClaims by (namespace, name).
    pub claims: BTreeMap<(String, String), ResourceClaim>,
    /// ResourceSlices by name.
    pub slices: BTreeMap<String, ResourceSlice>,
    /// Nodes: name → UID.
    pub nodes: BTreeMap<String, String>,
    /// Answer 503 to everything.
    pub down: bool,
    /// Before each of the next N PUTs / DELETEs of a slice, a concurrent writer changes it (its
    /// resourceVersion goes up), so the request's resourceVersion is stale.
    pub interfere: u32,
    /// Every request: `METHOD path -> code`.
    pub log: Vec<String>,
    /// The message of every 4xx/5xx answered.
    pub refused: Vec<String>,
    /// Every ResourceSlice change: (resourceVersion, event type, object), replayed to watches
    /// that start from an older version.
    pub events: Vec<(u64, &'static str, ResourceSlice)>,
    /// Open watches: their field selector and where their events go.
    watchers: Vec<(Selector, UnboundedSender<Bytes>)>,
    rv: u64,
}

/// A field selector of ResourceSlices: (`spec.nodeName`, `spec.driver`).
type Selector = (Option<String>, Option<String>);

fn selected((node, driver): &Selector, x: &ResourceSlice) -> bool {
    node.as_ref()
        .is_none_or(|n| x.spec.node_name.as_ref() == Some(n))
        && driver.as_ref().is_none_or(|d| &x.spec.driver == d)
}

/// A watch event as the API server sends it: one JSON object and a newline.
fn event_line(kind: &str, x: &ResourceSlice) -> Bytes {
    let mut line = json!({"type": kind, "object": x}).to_string();
    line.push('\n');
    Bytes::from(line)
}

impl State {
    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Records a change of `x` (at its resourceVersion) and tells the watches that select it.
    fn record(&mut self, kind: &'static str, x: &ResourceSlice) {
        let rv = x
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.rv);
        self.events.push((rv, kind, x.clone()));
        let line = event_line(kind, x);
        self.watchers
            .retain(|(sel, tx)| !selected(sel, x) || tx.send(line.clone()).is_ok());
    }

    /// Open watches (those whose client is still there are counted at their next event).
    pub fn watches(&self) -> usize {
        self.watchers.len()
    }

    /// Stores a claim (as if created by a user and allocated by a scheduler).
    pub fn put_claim(&mut self, mut claim: ResourceClaim) {
        claim.metadata.resource_version = Some(self.next_rv());
        let key = (
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        self.claims.insert(key, claim);
    }

    /// Requests that are not GETs of claims (i.e. ResourceSlice calls), for counting writes.
    pub fn slice_writes(&self) -> Vec<&String> {
        self.log
            .iter()
            .filter(|l| {
                (l.starts_with("POST") || l.starts_with("PUT") || l.starts_with("DELETE"))
                    && l.contains("/resourceslices")
            })
            .collect()
    }
}

/// A running stand-in.
pub struct StandIn {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    /// Its state.
    pub state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl StandIn {
    /// Starts one on `rt` on a free loopback port.
    pub fn start(rt: &tokio::runtime::Runtime) -> StandIn {
        Self::start_at(rt, "127.0.0.1:0".parse().unwrap(), Arc::default())
    }

    /// Starts one on `addr` with `state` (a restart after [`StandIn::stop`]).
    pub fn start_at(
        rt: &tokio::runtime::Runtime,
        addr: SocketAddr,
        state: Arc<Mutex<State>>,
    ) -> StandIn {
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(addr))
            .expect("bind the API stand-in");
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        rt.spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut rx => break,
                    a = listener.accept() => {
                        let Ok((stream, _)) = a else { continue };
                        let st = st.clone();
                        conns.spawn(async move {
                            let svc = hyper::service::service_fn(move |req| {
                                let st = st.clone();
                                async move { Ok::<_, Infallible>(handle(&st, req).await) }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
            // Stopped: open connections go too, as when the API server goes away.
            conns.abort_all();
        });
        StandIn {
            addr,
            state,
            stop: Some(tx),
        }
    }

    /// Locks the state.
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Stops listening (connections are refused from now on).
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Writes a kubeconfig for it (bearer token [`TOKEN`]) into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        kubeconfig_for(&format!("http://{}", self.addr), TOKEN, dir)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A kubeconfig naming `server` with bearer `token`, written to `<dir>/kubeconfig`.
pub fn kubeconfig_for(server: &str, token: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("kubeconfig");
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {server}\n\
             users:\n- name: plugin\n  user:\n    token: {token}\ncontexts:\n- name: standin\n  \
             context:\n    cluster: standin\n    user: plugin\ncurrent-context: standin\n"
        ),
    )
    .unwrap();
    p
}

fn status(code: StatusCode, reason: &str, message: String) -> (StatusCode, Value) {
    (
        code,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
        }),
    )
}

fn not_found(what: &str, name: &str) -> (StatusCode, Value) {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{what} \"{name}\" not found"),
    )
}

type Body = BoxBody<Bytes, Infallible>;

async fn handle(st: &Arc<Mutex<State>>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let mut s = st.lock().unwrap();
    let (code, value) = if s.down {
        status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "the API stand-in is down (test fault)".into(),
        )
    } else if auth.as_deref() != Some(&format!("Bearer {TOKEN}")) {
        status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized".into(),
        )
    } else if method == Method::GET
        && path == format!("{PREFIX}/resourceslices")
        && form_pairs(&query).contains(&("watch".into(), "true".into()))
    {
        match watch(&mut s, &query) {
            Ok(body) => {
                s.log.push(format!("WATCH {path} -> 200"));
                return Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/json")
                    .body(body)
                    .unwrap();
            }
            Err(e) => e,
        }
    } else {
        route(&mut s, &method, &path, &query, &body)
    };
    s.log.push(format!("{method} {path} -> {}", code.as_u16()));
    if !code.is_success() {
        let m = value["message"].as_str().unwrap_or("").to_string();
        s.refused.push(m);
    }
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())).boxed())
        .unwrap()
}

/// A watch of the slices `query` selects, from its `resourceVersion`: the recorded events after
/// it, then every new one.
fn watch(s: &mut State, query: &str) -> Result<Body, (StatusCode, Value)> {
    let sel = selector(query)?;
    let from: u64 = form_pairs(query)
        .into_iter()
        .find(|(k, _)| k == "resourceVersion")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(s.rv);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (rv, kind, x) in &s.events {
        if *rv > from && selected(&sel, x) {
            let _ = tx.send(event_line(kind, x));
        }
    }
    s.watchers.push((sel, tx));
    let frames = UnboundedReceiverStream::new(rx).map(|b| Ok(hyper::body::Frame::data(b)));
    Ok(StreamBody::new(frames).boxed())
}

fn route(
    s: &mut State,
    method: &Method,
    path: &str,
    query: &str,
    body: &[u8],
) -> (StatusCode, Value) {
    if let Some(name) = path.strip_prefix("/api/v1/nodes/") {
        return match (method, s.nodes.get(name)) {
            (&Method::GET, Some(uid)) => (
                StatusCode::OK,
                json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": name, "uid": uid, "resourceVersion": "1"}}),
            ),
            (&Method::GET, None) => not_found("nodes", name),
            _ => status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!("{method} {path}: not implemented by the API stand-in"),
            ),
        };
    }
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource".into(),
        );
    };
    let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    match (method.clone(), parts.as_slice()) {
        (Method::GET, ["namespaces", ns, "resourceclaims", name]) => {
            match s.claims.get(&(ns.to_string(), name.to_string())) {
                Some(c) => (StatusCode::OK, serde_json::to_value(c).unwrap()),
                None => not_found("resourceclaims.resource.k8s.io", name),
            }
        }
        (Method::GET, ["resourceslices"]) => list(s, query),
        (Method::DELETE, ["resourceslices"]) => delete_collection(s, query),
        (Method::POST, ["resourceslices"]) => create(s, body),
        (Method::GET, ["resourceslices", name]) => match s.slices.get(*name) {
            Some(x) => (StatusCode::OK, serde_json::to_value(x).unwrap()),
            None => not_found("resourceslices.resource.k8s.io", name),
        },
        (Method::PUT, ["resourceslices", name]) => update(s, name, body),
        (Method::DELETE, ["resourceslices", name]) => delete(s, name, body),
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} {path}: not implemented by the API stand-in"),
        ),
    }
}

/// The `fieldSelector` of `query` (only the field labels the API server supports for
/// ResourceSlices).
fn selector(query: &str) -> Result<Selector, (StatusCode, Value)> {
    let (mut node, mut driver) = (None, None);
    for (k, v) in form_pairs(query) {
        if k != "fieldSelector" {
            continue;
        }
        for term in v.split(',').filter(|t| !t.is_empty()) {
            let Some((field, value)) = term.split_once('=') else {
                return Err(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("invalid field selector {term:?}"),
                ));
            };
            match field {
                "spec.nodeName" => node = Some(value.to_string()),
                "spec.driver" => driver = Some(value.to_string()),
                f => {
                    return Err(status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        format!("field label not supported: {f}"),
                    ))
                }
            }
        }
    }
    Ok((node, driver))
}

/// `items` as a ResourceSliceList (items without apiVersion / kind, as the API server sends
/// them).
fn slice_list(rv: u64, items: Vec<&ResourceSlice>) -> Value {
    let items: Vec<Value> = items
        .into_iter()
        .map(|x| {
            let mut v = serde_json::to_value(x).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("apiVersion");
            o.remove("kind");
            v
        })
        .collect();
    json!({
        "kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    })
}

fn list(s: &State, query: &str) -> (StatusCode, Value) {
    let sel = match selector(query) {
        Ok(sel) => sel,
        Err(e) => return e,
    };
    let items = s.slices.values().filter(|x| selected(&sel, x)).collect();
    (StatusCode::OK, slice_list(s.rv, items))
}

/// DeleteCollection: every selected slice deleted; the list of them answered.
fn delete_collection(s: &mut State, query: &str) -> (StatusCode, Value) {
    let sel = match selector(query) {
        Ok(sel) => sel,
        Err(e) => return e,
    };
    let names: Vec<String> = s
        .slices
        .iter()
        .filter(|(_, x)| selected(&sel, x))
        .map(|(n, _)| n.clone())
        .collect();
    let mut gone = Vec::new();
    for name in names {
        if let Some(mut x) = s.slices.remove(&name) {
            x.metadata.resource_version = Some(s.next_rv());
            s.record("DELETED", &x);
            gone.push(x);
        }
    }
    (StatusCode::OK, slice_list(s.rv, gone.iter().collect()))
}

fn form_pairs(query: &str) -> Vec<(String, String)> {
    fn unescape(t: &str) -> String {
        let b = t.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                    out.push(u8::from_str_radix(h, 16).unwrap_or(b'?'));
                    i += 2;
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

/// The body as a ResourceSlice, strictly: JSON, the right apiVersion / kind, the v1 type, no
/// field the type does not know, valid.
fn decode(body: &[u8]) -> Result<ResourceSlice, (StatusCode, Value)> {
    let bad = |m: String| status(StatusCode::BAD_REQUEST, "BadRequest", m);
    let v: Value = serde_json::from_slice(body).map_err(|e| bad(format!("not JSON: {e}")))?;
    if v["apiVersion"] != "resource.k8s.io/v1" || v["kind"] != "ResourceSlice" {
        return Err(bad(format!(
            "expected resource.k8s.io/v1 ResourceSlice, got {} {}",
            v["apiVersion"], v["kind"]
        )));
    }
    // The deploy suite's strict check: the v1 type's round trip, a dropped field named.
    let back = strict::check(&v).map_err(|e| bad(format!("strict decoding error: {e}")))?;
    let typed: ResourceSlice = serde_json::from_value(back)
        .map_err(|e| bad(format!("does not decode as a v1 ResourceSlice: {e}")))?;
    let invalid = validate::resource_slice(&typed);
    if !invalid.is_empty() {
        let name = typed.metadata.name.clone().unwrap_or_default();
        let list: Vec<String> = invalid.iter().map(ToString::to_string).collect();
        return Err(status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "ResourceSlice.resource.k8s.io \"{name}\" is invalid: {}",
                list.join(", ")
            ),
        ));
    }
    Ok(typed)
}

/// The stand-in's pool checks (stricter than the API server, see the module's description).
fn pool_consistent(s: &State, x: &ResourceSlice) -> Result<(), (StatusCode, Value)> {
    let name = x.metadata.name.clone().unwrap_or_default();
    let pool = &x.spec.pool;
    for (other_name, o) in &s.slices {
        if *other_name == name || o.spec.driver != x.spec.driver || o.spec.pool.name != pool.name {
            continue;
        }
        if o.spec.pool.generation == pool.generation
            && o.spec.pool.resource_slice_count != pool.resource_slice_count
        {
            return Err(status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "ResourceSlice \"{name}\": pool {} generation {}: resourceSliceCount {} but {other_name} says {} (stand-in pool check)",
                    pool.name, pool.generation, pool.resource_slice_count, o.spec.pool.resource_slice_count
                ),
            ));
        }
        if o.spec.pool.generation > pool.generation {
            return Err(status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "ResourceSlice \"{name}\": pool {} generation {} is older than {other_name}'s {} (stand-in pool check)",
                    pool.name, pool.generation, o.spec.pool.generation
                ),
            ));
        }
    }
    Ok(())
}

fn create(s: &mut State, body: &[u8]) -> (StatusCode, Value) {
    let mut x = match decode(body) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let Some(name) = x.metadata.name.clone() else {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.name: Required value".into(),
        );
    };
    if x.metadata.resource_version.is_some() {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "resourceVersion should not be set on objects to be created".into(),
        );
    }
    if s.slices.contains_key(&name) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("resourceslices.resource.k8s.io \"{name}\" already exists"),
        );
    }
    if let Err(e) = pool_consistent(s, &x) {
        return e;
    }
    let rv = s.next_rv();
    x.metadata.resource_version = Some(rv.clone());
    x.metadata.uid = Some(format!("uid-{name}-{rv}"));
    x.metadata.generation = Some(1);
    canonicalise(&mut x);
    s.slices.insert(name, x.clone());
    s.record("ADDED", &x);
    (StatusCode::CREATED, serde_json::to_value(&x).unwrap())
}

fn interfere(s: &mut State, name: &str) {
    if s.interfere > 0 && s.slices.contains_key(name) {
        s.interfere -= 1;
        let rv = s.next_rv();
        if let Some(o) = s.slices.get_mut(name) {
            o.metadata.resource_version = Some(rv);
            let o = o.clone();
            s.record("MODIFIED", &o);
        }
    }
}

fn update(s: &mut State, name: &str, body: &[u8]) -> (StatusCode, Value) {
    let mut x = match decode(body) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if x.metadata.name.as_deref() != Some(name) {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "the name of the object ({:?}) does not match the name on the URL ({name})",
                x.metadata.name
            ),
        );
    }
    interfere(s, name);
    let Some(old) = s.slices.get(name).cloned() else {
        return not_found("resourceslices.resource.k8s.io", name);
    };
    let Some(rv) = x.metadata.resource_version.clone() else {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "metadata.resourceVersion: Invalid value: 0: must be specified for an update".into(),
        );
    };
    if old.metadata.resource_version.as_deref() != Some(rv.as_str()) {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
        );
    }
    for (field, changed) in [
        ("spec.driver", old.spec.driver != x.spec.driver),
        ("spec.nodeName", old.spec.node_name != x.spec.node_name),
    ] {
        if changed {
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("ResourceSlice.resource.k8s.io \"{name}\" is invalid: {field}: field is immutable"),
            );
        }
    }
    if let Err(e) = pool_consistent(s, &x) {
        return e;
    }
    x.metadata.uid = old.metadata.uid.clone();
    x.metadata.generation = Some(old.metadata.generation.unwrap_or(1) + 1);
    x.metadata.resource_version = Some(s.next_rv());
    canonicalise(&mut x);
    s.slices.insert(name.to_string(), x.clone());
    s.record("MODIFIED", &x);
    (StatusCode::OK, serde_json::to_value(&x).unwrap())
}

fn delete(s: &mut State, name: &str, body: &[u8]) -> (StatusCode, Value) {
    interfere(s, name);
    let Some(old) = s.slices.get(name).cloned() else {
        return not_found("resourceslices.resource.k8s.io", name);
    };
    let opts: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let pre = &opts["preconditions"];
    let stale_rv = pre["resourceVersion"]
        .as_str()
        .is_some_and(|rv| old.metadata.resource_version.as_deref() != Some(rv));
    let stale_uid = pre["uid"]
        .as_str()
        .is_some_and(|u| old.metadata.uid.as_deref() != Some(u));
    if stale_rv || stale_uid {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"{name}\": the precondition on {} failed",
                if stale_uid { "UID" } else { "ResourceVersion" }
            ),
        );
    }
    s.slices.remove(name);
    let mut gone = old.clone();
    gone.metadata.resource_version = Some(s.next_rv());
    s.record("DELETED", &gone);
    (StatusCode::OK, serde_json::to_value(&old).unwrap())
}

/// A quantity as the API server returns it: plain digits in canonical decimal-SI form (trailing
/// zeros in groups of three become `k`, `M`, `G`, `T`, `P`, `E`); other forms are left as given.
pub fn canonical(text: &str) -> String {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return text.to_string();
    }
    let digits = text.trim_start_matches('0');
    if digits.is_empty() {
        return "0".into();
    }
    let zeros = digits.len() - digits.trim_end_matches('0').len();
    let groups = (zeros / 3).min(6);
    let suffix = ["", "k", "M", "G", "T", "P", "E"][groups];
    format!("{}{suffix}", &digits[..digits.len() - 3 * groups])
}

fn canonicalise(x: &mut ResourceSlice) {
    each_quantity(&mut x.spec, |q| q.0 = canonical(&q.0));
}
