//! IPC memory handles and VMM file-descriptor handles across two processes: the importer is
//! charged nothing, reopening is reference counted, and a dead exporter's handle is refused.

mod child_support;
#[allow(unused_imports)]
use child_support::*;

use std::ffi::{c_int, c_uint, c_void};
use std::process::Command;

type Ctx = *mut u8;
type FnInit = unsafe extern "C" fn(u32) -> u32;
type FnCreate = unsafe extern "C" fn(*mut Ctx, c_uint, c_int) -> u32;
type FnInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> u32;
type FnAlloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type FnGetHandle = unsafe extern "C" fn(*mut [u8; 64], u64) -> u32;
type FnOpen = unsafe extern "C" fn(*mut u64, [u8; 64], c_uint) -> u32;
type FnClose = unsafe extern "C" fn(u64) -> u32;

const DEV: &str = "name=Test GPU,mem=1Gi,sms=8,cc=9.0";
const ENV: &[(&str, &str)] = &[
    ("GPUSLICE_SIM_DEVICES", DEV),
    ("GPUSLICE_SIM_CTX_OVERHEAD", "0"),
];

#[repr(C)]
struct Prop {
    alloc_type: u32,
    handle_types: u32,
    loc_type: u32,
    loc_id: c_int,
    win32: *mut c_void,
    flags: [u8; 8],
}

fn setup(lib: &Lib) -> FnInfo {
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let init: FnInit = lib.sym("cuInit");
        let create: FnCreate = lib.sym("cuCtxCreate_v2");
        assert_eq!(init(0), SUCCESS);
        let mut c: Ctx = std::ptr::null_mut();
        assert_eq!(create(&mut c, 0, 0), SUCCESS);
        lib.sym("cuMemGetInfo_v2")
    }
}

fn used(info: FnInfo) -> u64 {
    let (mut f, mut t) = (0usize, 0usize);
    // SAFETY: live out-pointers.
    assert_eq!(unsafe { info(&mut f, &mut t) }, SUCCESS);
    (t - f) as u64
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).unwrap_or(0);
    }
    out
}

/// Re-runs `test` as a helper process with `role` and extra variables; returns its output.
fn helper(test: &str, role: &str, vars: &[(&str, String)]) -> std::process::Output {
    Command::new(std::env::current_exe().expect("exe"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("H2_ROLE", role)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("spawn helper")
}

fn importer(lib: &Lib) {
    let info = setup(lib);
    let handle = unhex(&std::env::var("H2_HANDLE").unwrap_or_default());
    let fd_path = std::env::var("H2_FD_PATH").unwrap_or_default();
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let open: FnOpen = lib.sym("cuIpcOpenMemHandle_v2");
        let close: FnClose = lib.sym("cuIpcCloseMemHandle");
        let range: unsafe extern "C" fn(*mut u64, *mut usize, u64) -> u32 =
            lib.sym("cuMemGetAddressRange_v2");
        let htod: unsafe extern "C" fn(u64, *const c_void, usize) -> u32 =
            lib.sym("cuMemcpyHtoD_v2");
        let exporter_used = used(info);
        assert_eq!(
            exporter_used,
            6 * MI + 4 * MI,
            "the exporter's memory, nothing of ours"
        );
        let (mut p, mut q) = (0u64, 0u64);
        assert_eq!(open(&mut p, handle, 1), SUCCESS);
        assert_eq!(open(&mut q, handle, 1), SUCCESS);
        assert_eq!(p, q, "same handle, same mapping");
        assert_eq!(used(info), exporter_used, "opening charges nobody new");
        let (mut base, mut size) = (0u64, 0usize);
        assert_eq!(range(&mut base, &mut size, p + 10), SUCCESS);
        assert_eq!((base, size as u64), (p, 5 * MI));
        let buf = [1u8; 64];
        assert_eq!(htod(p, buf.as_ptr().cast(), 64), SUCCESS);
        assert_eq!(open(&mut q, handle, 8), INVALID_VALUE, "unknown flag");
        assert_eq!(close(p), SUCCESS);
        assert_eq!(close(p), SUCCESS, "second reference");
        assert_eq!(close(p), INVALID_VALUE);
        assert_eq!(open(&mut q, [0u8; 64], 1), INVALID_VALUE, "garbage handle");

        // The exporter's VMM allocation, through its file descriptor.
        let import: unsafe extern "C" fn(*mut u64, *mut c_void, u32) -> u32 =
            lib.sym("cuMemImportFromShareableHandle");
        let release: unsafe extern "C" fn(u64) -> u32 = lib.sym("cuMemRelease");
        let reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> u32 =
            lib.sym("cuMemAddressReserve");
        let map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> u32 = lib.sym("cuMemMap");
        let unmap: unsafe extern "C" fn(u64, usize) -> u32 = lib.sym("cuMemUnmap");
        let path = std::ffi::CString::new(fd_path).expect("path");
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
        assert!(fd >= 0, "open the exporter's fd through /proc");
        let mut h = 0u64;
        assert_eq!(import(&mut h, fd as usize as *mut c_void, 1), SUCCESS);
        libc::close(fd);
        let mut va = 0u64;
        assert_eq!(reserve(&mut va, (4 * MI) as usize, 0, 0, 0), SUCCESS);
        assert_eq!(map(va, (4 * MI) as usize, 0, h, 0), SUCCESS);
        assert_eq!(
            used(info),
            exporter_used,
            "importing and mapping charge nobody new"
        );
        assert_eq!(unmap(va, (4 * MI) as usize), SUCCESS);
        assert_eq!(release(h), SUCCESS);
        assert_eq!(used(info), exporter_used, "the exporter still owns it");
    }
}

#[test]
fn ipc_and_fd_handles_across_processes() {
    if in_child("ipc_and_fd_handles_across_processes", ENV) {
        return;
    }
    let lib = Lib::open();
    if std::env::var("H2_ROLE").as_deref() == Ok("import") {
        importer(&lib);
        return;
    }
    let info = setup(&lib);
    // SAFETY: symbols with their C signatures; out-pointers are live locals.
    unsafe {
        let alloc: FnAlloc = lib.sym("cuMemAlloc_v2");
        let get: FnGetHandle = lib.sym("cuIpcGetMemHandle");
        let open: FnOpen = lib.sym("cuIpcOpenMemHandle_v2");
        let mut p = 0u64;
        assert_eq!(alloc(&mut p, (5 * MI) as usize), SUCCESS);
        let mut handle = [0u8; 64];
        assert_eq!(get(&mut handle, p), SUCCESS);
        let mut q = 0u64;
        assert_eq!(open(&mut q, handle, 1), INVALID_CONTEXT, "own handle");

        let create: unsafe extern "C" fn(*mut u64, usize, *const Prop, u64) -> u32 =
            lib.sym("cuMemCreate");
        let export: unsafe extern "C" fn(*mut c_void, u64, u32, u64) -> u32 =
            lib.sym("cuMemExportToShareableHandle");
        let prop = Prop {
            alloc_type: 1,
            handle_types: 1,
            loc_type: 1,
            loc_id: 0,
            win32: std::ptr::null_mut(),
            flags: [0; 8],
        };
        let mut h = 0u64;
        assert_eq!(create(&mut h, (4 * MI) as usize, &prop, 0), SUCCESS);
        let mut fd: c_int = -1;
        assert_eq!(export((&mut fd as *mut c_int).cast(), h, 1, 0), SUCCESS);
        assert_eq!(used(info), 6 * MI + 4 * MI);

        let out = helper(
            "ipc_and_fd_handles_across_processes",
            "import",
            &[
                ("H2_HANDLE", hex(&handle)),
                (
                    "H2_FD_PATH",
                    format!("/proc/{}/fd/{fd}", std::process::id()),
                ),
            ],
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("1 passed"),
            "importer failed:\n{text}"
        );
        assert_eq!(used(info), 10 * MI, "the importer's exit changed nothing");
    }
}

#[test]
fn handle_of_a_dead_exporter_is_refused() {
    if in_child("handle_of_a_dead_exporter_is_refused", ENV) {
        return;
    }
    let lib = Lib::open();
    if std::env::var("H2_ROLE").as_deref() == Ok("export") {
        let _ = setup(&lib);
        // SAFETY: symbols with their C signatures; out-pointers are live locals.
        unsafe {
            let alloc: FnAlloc = lib.sym("cuMemAlloc_v2");
            let get: FnGetHandle = lib.sym("cuIpcGetMemHandle");
            let mut p = 0u64;
            assert_eq!(alloc(&mut p, (2 * MI) as usize), SUCCESS);
            let mut handle = [0u8; 64];
            assert_eq!(get(&mut handle, p), SUCCESS);
            println!("HANDLE={}", hex(&handle));
        }
        return;
    }
    let out = helper("handle_of_a_dead_exporter_is_refused", "export", &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "exporter failed: {text}");
    // The harness may print "test ... " on the same line: search anywhere.
    let line = text
        .split("HANDLE=")
        .nth(1)
        .and_then(|rest| rest.get(..128))
        .expect("exporter printed its handle");
    let handle = unhex(line.trim());
    let info = setup(&lib);
    assert_eq!(used(info), 0, "the dead exporter's memory was reclaimed");
    // SAFETY: symbol with its C signature; out-pointer is a live local.
    unsafe {
        let open: FnOpen = lib.sym("cuIpcOpenMemHandle_v2");
        let mut q = 0u64;
        assert_eq!(open(&mut q, handle, 1), INVALID_VALUE);
    }
}
