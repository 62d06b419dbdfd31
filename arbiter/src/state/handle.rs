//! Request handling: one protocol line in, one reply out. Each request is applied to a copy of
//! the admission state first and committed (records saved, region files written, the scheduler
//! told) only when every step succeeded. Protocol: `docs/protocol.md`.

use gpuslice_api::pod::PodRef;
use gpuslice_api::{
    ErrorCode, Owner, Request, RequestEnvelope, Response, ResponseEnvelope, SliceRequest,
    PROTOCOL_VERSION,
};

use super::State;
use crate::admission::{Admission, Change};

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
            } => self.admit(slice_id, request, owner),
            Request::Release { slice_id } => self.release(slice_id),
            Request::Update {
                slice_id,
                memory,
                compute,
                compute_limit,
                priority,
            } => self.update(
                slice_id,
                &Change {
                    memory,
                    compute,
                    compute_limit,
                    priority,
                },
            ),
            Request::Bind {
                slice_id,
                pid,
                cgroup,
                pod,
            } => self.bind(slice_id, pid, cgroup, pod),
            Request::Status {} => self.status(),
        }
    }

    /// `admit`: places the slice on a copy of the admission state; a new slice is committed
    /// (record, files, scheduler) before the copy replaces the state.
    fn admit(&mut self, slice_id: String, request: SliceRequest, owner: Owner) -> Response {
        self.forget_exited_foreign();
        let mut next = self.admission.clone();
        let held = |id: &str, uuid: &str| self.held(id, uuid);
        let got = match next.admit_holding(&slice_id, request, owner, &held) {
            Ok(got) => got,
            Err(e) => {
                self.events.count_refusal(e.code());
                return error(e.code(), e.to_string());
            }
        };
        if !got.existing {
            if let Err(refused) = self.commit_admitted(next, &slice_id) {
                return refused;
            }
        }
        Response::Admitted {
            slice_dir: self.store.slice_dir(&slice_id),
            slice_id,
            devices: got.devices,
            existing: got.existing,
        }
    }

    /// Saves the record of the slice `next` has just admitted and creates its files; only then
    /// does `next` become the state. A failure removes what was written.
    fn commit_admitted(&mut self, next: Admission, slice_id: &str) -> Result<(), Response> {
        let Some(rec) = next.slice(slice_id) else {
            return Err(error(ErrorCode::Internal, "admitted slice vanished"));
        };
        if let Err(e) = self.store.save(rec) {
            let _ = self.store.remove(slice_id);
            return Err(error(
                ErrorCode::Internal,
                format!("cannot write the slice record: {e}"),
            ));
        }
        crate::owner::record_owner_at_admit(&self.store.slice_dir(slice_id), &rec.owner);
        if let Err(e) = self.start_slice(rec) {
            let _ = self.store.remove(slice_id);
            return Err(error(
                ErrorCode::Internal,
                format!("cannot create the slice files: {e}"),
            ));
        }
        let before = std::mem::replace(&mut self.admission, next);
        self.rewrite_best_effort(&before, slice_id);
        Ok(())
    }

    /// `release`: the scheduler forgets the slice, its directory goes, then its admission.
    fn release(&mut self, slice_id: String) -> Response {
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

    /// `update`: the change applied to a copy, saved, pushed live to the slice's limits and
    /// the scheduler, then committed.
    fn update(&mut self, slice_id: String, change: &Change) -> Response {
        let mut next = self.admission.clone();
        // Measured use, from the slices' usage files: the slice's own for the below-use
        // warning, best-effort neighbours' so that their caps never drop below it.
        let held = |id: &str, uuid: &str| self.held(id, uuid);
        let up = match next.update_holding(&slice_id, change, &held) {
            Ok(up) => up,
            Err(e) => return error(e.code(), e.to_string()),
        };
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

    /// `bind`: the slice's processes (and Pod) recorded, saved, then committed.
    fn bind(
        &mut self,
        slice_id: String,
        pid: Option<u32>,
        cgroup: Option<String>,
        pod: Option<PodRef>,
    ) -> Response {
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

    /// `status`: admission's view with the scheduler's shares, the backstop's recent events,
    /// the slices' processes and the devices' context footprints.
    fn status(&self) -> Response {
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
