"""Real-driver facts for the simulator (issue #32): a context's footprint and what lazy module
loading adds, as NVML lists them; and NVML's raw per-process utilisation samples under loads
whose device time is known. Needs PyTorch (CUDA) and nvidia-ml-py. Writes JSON to argv[1]."""

import json
import multiprocessing as mp
import os
import sys
import threading
import time

import pynvml as N

MiB = 1 << 20


def nvml_self_mib():
    h = N.nvmlDeviceGetHandleByIndex(0)
    for p in N.nvmlDeviceGetComputeRunningProcesses(h):
        if p.pid == os.getpid():
            return (p.usedGpuMemory or 0) / MiB
    return None


def footprint(kind, q):
    """One child: steps of a context's life, NVML's figure for this pid after each."""
    if kind.endswith("_eager"):
        os.environ["CUDA_MODULE_LOADING"] = "EAGER"
    N.nvmlInit()
    steps = []
    try:
        if kind.startswith("driver"):
            from cuda.bindings import driver as cu
            cu.cuInit(0)
            _, dev = cu.cuDeviceGet(0)
            _, ctx = cu.cuDevicePrimaryCtxRetain(dev)
            cu.cuCtxSetCurrent(ctx)
            _, free0, total = cu.cuMemGetInfo()
            steps.append(("context", nvml_self_mib(), free0 / MiB))
            _, p = cu.cuMemAlloc(256 * MiB)
            _, free1, _ = cu.cuMemGetInfo()
            steps.append(("alloc_256MiB", nvml_self_mib(), free1 / MiB))
            _, limit = cu.cuCtxGetLimit(cu.CUlimit.CU_LIMIT_STACK_SIZE)
            steps.append(("stack_limit_bytes", float(limit), None))
            cu.cuCtxSetLimit(cu.CUlimit.CU_LIMIT_STACK_SIZE, 64 * 1024)
            _, free2, _ = cu.cuMemGetInfo()
            steps.append(("stack_64KiB", nvml_self_mib(), free2 / MiB))
        else:
            import torch
            torch.cuda.init()
            x = torch.empty(1, device="cuda")
            torch.cuda.synchronize()
            steps.append(("torch_context", nvml_self_mib(), torch.cuda.mem_get_info()[0] / MiB))
            a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
            b = a @ a
            torch.cuda.synchronize()
            steps.append(("after_bf16_matmul", nvml_self_mib(), torch.cuda.mem_get_info()[0] / MiB))
            c = torch.softmax(a.float(), 1) + torch.nn.functional.layer_norm(a.float(), (1024,))
            torch.cuda.synchronize()
            steps.append(("after_softmax_layernorm", nvml_self_mib(), torch.cuda.mem_get_info()[0] / MiB))
            conv = torch.nn.Conv2d(16, 32, 3).cuda()
            y = conv(torch.randn(8, 16, 64, 64, device="cuda"))
            torch.cuda.synchronize()
            steps.append(("after_conv_cudnn", nvml_self_mib(), torch.cuda.mem_get_info()[0] / MiB))
            y = torch.sort(torch.randn(1 << 20, device="cuda"))[0].cumsum(0)
            torch.cuda.synchronize()
            steps.append(("after_sort_cumsum", nvml_self_mib(), torch.cuda.mem_get_info()[0] / MiB))
            steps.append(("torch_reserved", torch.cuda.memory_reserved() / MiB, None))
            del x, b, c, y
    except Exception as e:  # noqa: BLE001 - a fact probe reports, never crashes
        steps.append(("error", repr(e), None))
    q.put({"kind": kind, "steps": steps})


def calibrate():
    import torch
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cyc = 10_000_000
    s.record()
    torch.cuda._sleep(cyc)
    e.record()
    e.synchronize()
    return cyc / s.elapsed_time(e)  # cycles per ms


def worker(name, cmd_q, res_q, sem_mine, sem_other):
    import torch
    cpms = calibrate()
    res_q.put((name, "ready", os.getpid(), cpms))
    while True:
        cmd = cmd_q.get()
        if cmd is None:
            return
        kind, kernel_ms, idle_ms, secs = cmd
        cyc = int(kernel_ms * cpms)
        t_end = time.monotonic() + secs
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        busy = 0.0
        n = 0
        t0 = time.monotonic()
        while time.monotonic() < t_end:
            if kind == "token":
                if not sem_mine.acquire(timeout=0.5):
                    continue
            s.record()
            for _ in range(1 if kind != "saturate" else 8):
                torch.cuda._sleep(cyc)
                n += 1
            e.record()
            e.synchronize()
            busy += s.elapsed_time(e)
            if kind == "token":
                sem_other.release()
            elif idle_ms:
                time.sleep(idle_ms / 1000)
        res_q.put((name, "done", busy, time.monotonic() - t0, n))


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.h = N.nvmlDeviceGetHandleByIndex(0)
        self.samples, self.dev, self.v2 = [], [], []
        self.stop = threading.Event()
        self.last = 0
        self.last2 = 0
        self.lastdev = 0

    def run(self):
        while not self.stop.is_set():
            now = time.time()
            try:
                for s in N.nvmlDeviceGetProcessUtilization(self.h, self.last):
                    self.samples.append([now, s.pid, s.timeStamp, s.smUtil, s.memUtil])
                    self.last = max(self.last, s.timeStamp)
            except N.NVMLError as e:
                if "Not Found" not in str(e):
                    self.samples.append([now, "error", str(e)])
            try:
                info = N.nvmlDeviceGetProcessesUtilizationInfo(self.h, self.last2)
                for s in info:
                    self.v2.append([now, s.pid, s.timeStamp, s.smUtil, s.memUtil])
                    self.last2 = max(self.last2, s.timeStamp)
            except Exception as e:  # noqa: BLE001
                if not self.v2 or self.v2[-1][1] != "error":
                    self.v2.append([now, "error", repr(e)])
            try:
                typ, vals = N.nvmlDeviceGetSamples(self.h, N.NVML_GPU_UTILIZATION_SAMPLES, self.lastdev)
                for v in vals:
                    self.dev.append([now, v.timeStamp, v.sampleValue.uiVal])
                    self.lastdev = max(self.lastdev, v.timeStamp)
            except N.NVMLError:
                pass
            time.sleep(0.1)


def scenario(out, name, cmds, workers, res_q, sems):
    sampler = Sampler()
    sampler.start()
    t0 = time.time()
    for (w, c) in zip(workers, cmds):
        if c is not None:
            w.put(c)
    if any(c and c[0] == "token" for c in cmds):
        sems[0].release()
    results = []
    for c in cmds:
        if c is not None:
            results.append(res_q.get(timeout=60))
    # drain a leftover token
    for s in sems:
        while s.acquire(timeout=0.01):
            pass
    time.sleep(1.5)  # samples of the tail
    sampler.stop.set()
    sampler.join()
    out["scenarios"].append({"name": name, "start": t0, "end": time.time(), "cmds": cmds,
                             "results": results, "samples": sampler.samples,
                             "samples_v2": sampler.v2, "device_samples": sampler.dev})
    print("scenario", name, "results", results, "nsamples", len(sampler.samples), flush=True)


def main():
    path = sys.argv[1]
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    out = {"driver": N.nvmlSystemGetDriverVersion(), "name": N.nvmlDeviceGetName(h),
           "footprints": [], "scenarios": []}
    try:
        out["accounting_mode"] = N.nvmlDeviceGetAccountingMode(h)
    except N.NVMLError as e:
        out["accounting_mode"] = str(e)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    kinds = ["driver", "driver_eager", "torch", "torch_eager"]
    ps = [ctx.Process(target=footprint, args=(k, q)) for k in kinds]
    for p in ps:
        p.start()
    for _ in ps:
        try:
            r = q.get(timeout=120)
        except Exception:  # noqa: BLE001
            break
        out["footprints"].append(r)
        print("footprint", json.dumps(r), flush=True)
    for p in ps:
        p.join(5)
    json.dump(out, open(path, "w"))

    cmd_qs = [ctx.Queue(), ctx.Queue()]
    res_q = ctx.Queue()
    sems = [ctx.Semaphore(0), ctx.Semaphore(0)]
    ws = [ctx.Process(target=worker, args=("A", cmd_qs[0], res_q, sems[0], sems[1])),
          ctx.Process(target=worker, args=("B", cmd_qs[1], res_q, sems[1], sems[0]))]
    for w in ws:
        w.start()
    out["workers"] = [res_q.get(timeout=120), res_q.get(timeout=120)]
    print("workers", out["workers"], flush=True)
    T = float(os.environ.get("PROBE_SECS", "6"))
    plan = [
        ("alone_saturate_1ms", [("saturate", 1.0, 0, T), None]),
        ("alone_duty30_1ms", [("duty", 1.0, 2.33, T), None]),
        ("alone_duty30_50ms", [("duty", 50.0, 116.7, T), None]),
        ("pair_saturate_1ms", [("saturate", 1.0, 0, T), ("saturate", 1.0, 0, T)]),
        ("pair_token_5ms_11.7ms", [("token", 5.0, 0, T), ("token", 11.67, 0, T)]),
        ("pair_token_30ms_70ms", [("token", 30.0, 0, T), ("token", 70.0, 0, T)]),
    ]
    for name, cmds in plan:
        try:
            scenario(out, name, cmds, cmd_qs, res_q, sems)
        except Exception as e:  # noqa: BLE001
            print("scenario", name, "error", repr(e), flush=True)
        json.dump(out, open(path, "w"))
    for cq in cmd_qs:
        cq.put(None)
    for w in ws:
        w.join(10)
        if w.is_alive():
            w.kill()


if __name__ == "__main__":
    main()
