//! Request handling: one protocol line in, one reply out. Each request is applied to a copy of
//! the admission state first and committed (records saved, region files written, the scheduler
//! told) only when every step succeeded. Protocol: `docs/protocol.md`.

use gpuslice_api::{
    ErrorCode, Request, RequestEnvelope, Response, ResponseEnvelope, PROTOCOL_VERSION,
};

use super::State;
use crate::admission::Change;

fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        message: message.into(),
    }
}

impl State {
    /// Applies one request.
    pub fn handle(&mut self, request: Request) -> Response {
        match request {
            Request::Admit {
                slice_id,
                request,
                owner,
            } => {
                self.forget_exited_foreign();
                let mut next = self.admission.clone();
                let held = |id: &str, uuid: &str| self.held(id, uuid);
                match next.admit_holding(&slice_id, request, owner, &held) {
                    Err(e) => {
                        self.events.count_refusal(e.code());
                        error(e.code(), e.to_string())
                    }
                    Ok(got) => {
                        if !got.existing {
                            let Some(rec) = next.slice(&slice_id) else {
                                return error(ErrorCode::Internal, "admitted slice vanished");
                            };
                            if let Err(e) = self.store.save(rec) {
                                let _ = self.store.remove(&slice_id);
                                return error(
                                    ErrorCode::Internal,
                                    format!("cannot write the slice record: {e}"),
                                );
                            }
                            crate::owner::record_owner_at_admit(
                                &self.store.slice_dir(&slice_id),
                                &rec.owner,
                            );
                            if let Err(e) = self.start_slice(rec) {
                                let _ = self.store.remove(&slice_id);
                                return error(
                                    ErrorCode::Internal,
                                    format!("cannot create the slice files: {e}"),
                                );
                            }
                            let before = std::mem::replace(&mut self.admission, next);
                            self.rewrite_best_effort(&before, &slice_id);
                        }
                        Response::Admitted {
                            slice_dir: self.store.slice_dir(&slice_id),
                            slice_id,
                            devices: got.devices,
                            existing: got.existing,
                        }
                    }
                }
            }
            Request::Release { slice_id } => {
                if self.admission.slice(&slice_id).is_none() {
                    return error(ErrorCode::NotFound, format!("no slice \"{slice_id}\""));
                }
                if let Some(sched) = &self.sched {
                    sched.remove(&slice_id);
                }
                if let Err(e) = self.store.remove(&slice_id) {
                    return error(
                        ErrorCode::Internal,
                        format!("cannot remove the slice directory: {e}"),
                    );
                }
                let before = self.admission.clone();
                match self.admission.release(&slice_id) {
                    Ok(_) => {
                        self.events.forget(&slice_id);
                        self.rewrite_best_effort(&before, &slice_id);
                        Response::Released { slice_id }
                    }
                    Err(e) => error(e.code(), e.to_string()),
                }
            }
            Request::Update {
                slice_id,
                memory,
                compute,
                compute_limit,
                priority,
            } => {
                let change = Change {
                    memory,
                    compute,
                    compute_limit,
                    priority,
                };
                let mut next = self.admission.clone();
                // Measured use, from the slices' usage files: the slice's own for the below-use
                // warning, best-effort neighbours' so that their caps never drop below it.
                let held = |id: &str, uuid: &str| self.held(id, uuid);
                match next.update_holding(&slice_id, &change, &held) {
                    Err(e) => error(e.code(), e.to_string()),
                    Ok(up) => {
                        let Some(rec) = next.slice(&slice_id) else {
                            return error(ErrorCode::Internal, "updated slice vanished");
                        };
                        if let Err(e) = self.store.save(rec) {
                            return error(
                                ErrorCode::Internal,
                                format!("cannot write the slice record: {e}"),
                            );
                        }
                        if let Some(sched) = &self.sched {
                            // Live resize: limits (memory cap is one store) and shares now.
                            let dir = self.store.slice_dir(&slice_id);
                            if let Err(e) = crate::slices::write_limits(&dir, rec) {
                                tracing::warn!("slice {slice_id}: cannot rewrite limits: {e}");
                            }
                            sched.update(&slice_id, crate::sched::params_of(&rec.request));
                        }
                        let before = std::mem::replace(&mut self.admission, next);
                        self.rewrite_best_effort(&before, &slice_id);
                        Response::Updated {
                            slice_id,
                            devices: up.devices,
                            warnings: up.warnings,
                        }
                    }
                }
            }
            Request::Bind {
                slice_id,
                pid,
                cgroup,
                pod,
            } => {
                let mut next = self.admission.clone();
                let rec = match next.bind(&slice_id, pid, cgroup, pod) {
                    Ok(rec) => rec,
                    Err(e) => return error(e.code(), e.to_string()),
                };
                if let Err(e) = self.store.save(rec) {
                    return error(
                        ErrorCode::Internal,
                        format!("cannot write the slice record: {e}"),
                    );
                }
                crate::owner::record_owner_at_admit(&self.store.slice_dir(&slice_id), &rec.owner);
                self.admission = next;
                Response::Bound { slice_id }
            }
            Request::Status {} => {
                let mut status = self.admission.status();
                if let Some(sched) = &self.sched {
                    crate::sched::fill_shares(&mut status, &sched.status());
                }
                status.backstop = self.events.recent_backstop();
                status.processes = self
                    .events
                    .footprints(|id| self.admission.slice(id).is_some());
                let policy = self.admission.policy();
                for d in &mut status.devices {
                    d.context = crate::contexts::status_of(&self.contexts, d.index, policy);
                }
                Response::Status(status)
            }
        }
    }

    /// Parses and applies one request line.
    pub fn handle_line(&mut self, line: &str) -> ResponseEnvelope {
        // Check the version first so an old client gets `version`, not a parse error.
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return ResponseEnvelope::new(error(
                    ErrorCode::BadRequest,
                    format!("not JSON: {e}"),
                ))
            }
        };
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(PROTOCOL_VERSION) => {}
            Some(v) => {
                return ResponseEnvelope::new(error(
                    ErrorCode::Version,
                    format!(
                        "protocol version {v} is not supported (arbiter speaks {PROTOCOL_VERSION})"
                    ),
                ))
            }
            None => {
                return ResponseEnvelope::new(error(ErrorCode::BadRequest, "missing \"version\""))
            }
        }
        match serde_json::from_value::<RequestEnvelope>(value) {
            Ok(env) => {
                let what = describe(&env.request);
                let response = self.handle(env.request);
                log_outcome(what, &response);
                ResponseEnvelope::new(response)
            }
            Err(e) => ResponseEnvelope::new(error(ErrorCode::BadRequest, e.to_string())),
        }
    }
}

/// What a state-changing request is, for the log (`None`: a query, not logged).
fn describe(r: &Request) -> Option<String> {
    match r {
        Request::Admit { slice_id, .. } => Some(format!("admit {slice_id}")),
        Request::Release { slice_id } => Some(format!("release {slice_id}")),
        Request::Update { slice_id, .. } => Some(format!("update {slice_id}")),
        Request::Bind { slice_id, pid, .. } => Some(match pid {
            Some(p) => format!("bind {slice_id} to pid {p}"),
            None => format!("bind {slice_id}"),
        }),
        _ => None,
    }
}

/// One line per admit, release, update and bind at the default level: what was asked and
/// what came of it (placement, or the refusal's reason).
fn log_outcome(what: Option<String>, r: &Response) {
    let Some(what) = what else { return };
    match r {
        Response::Admitted { devices, .. } => {
            let on: Vec<String> = devices
                .iter()
                .map(|d| match (d.memory_cap, d.memory_best_effort) {
                    (Some(c), _) => format!("GPU {} cap {} MiB", d.index, c >> 20),
                    (None, Some(b)) => format!("GPU {} best effort, {} MiB now", d.index, b >> 20),
                    (None, None) => format!("GPU {} uncapped", d.index),
                })
                .collect();
            tracing::info!("{what}: admitted on {}", on.join(", "));
        }
        Response::Error { code, message } => {
            tracing::info!("{what}: refused ({code:?}): {message}")
        }
        _ => tracing::info!("{what}: done"),
    }
}
