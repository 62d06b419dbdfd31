"""The kit's section 6, serving (issue #36): an LLM server beside training on one GPU.

The server is `torch_workloads.py serve` (serving.py: a decoder-only transformer with random
weights, static KV cache, graph-captured decode, Poisson requests); on the simulated GPU it is
`gpuslice-workload serve` (graph replays of short kernels per token, the same keys). The trainer
and the batch tenant are the kit's GEMM loop (8192² bf16, synchronised every 10: 1.4 ms GEMMs on
an H200), started together with the server through `--start-at`.

Scenarios: the server alone; beside the trainer at normal priority; beside it at `priority:
high`; three tenants (server high 20 %, trainer 50 %, batch 30 %). Rows: time to first token and
inter-token latency p50/p99 (and p99 against alone), tokens/s; the trainer's throughput against
its alone and against the device time the server leaves; in the three-tenant run each tenant's
share of its alone throughput and its NVML memory peak against its cap plus the context charge.
The goal of issue #36 is the verdict of the high-priority row: p99 inter-token latency within
alone + 0.5 ms, the trainer keeping >= 90 % of what the server leaves.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER_MEM, SERVER_CAP = "8Gi", 8 << 30
TENANT_CAP = 16 << 30
RATE = 10  # requests per second
GOAL_MS = 0.5


def server_argv(kit, secs, start_at):
    if kit.dry:
        return [os.path.join(kit.dist, "sim/bin/gpuslice-workload"), "--via", "dlsym", "serve",
                "--rate", str(RATE), "--seconds", str(secs)]
    return [sys.executable, os.path.join(HERE, "torch_workloads.py"), "serve", "--rate",
            str(RATE), "--seconds", str(secs), "--start-at", f"{start_at:.3f}"]


def scenario(kit, name, server_opts, others, secs, lead):
    """Runs the server beside `others` [(label, gpuslice-run options)]: (server kv, {label: kv},
    {label: NVML peak bytes}, raw). `server_opts` None: everything bare, without gpuslice."""
    from kit import parse_kv

    def under(opts, argv):
        return argv if server_opts is None else kit.under(opts, argv)
    start_at = time.time() + lead
    procs = {}
    for label, opts in others:
        procs[label] = kit.spawn(under(opts, kit.workload(
            "matmul", seconds=secs + 1, start_at=start_at - 1, warm_s=1)))
    procs["server"] = kit.spawn(under(["--memory", SERVER_MEM] + (server_opts or []),
                                      server_argv(kit, secs, start_at)))
    peaks = {k: 0 for k in procs}
    mark = kit.log_mark()
    t_end = time.monotonic() + lead + secs + 60
    while procs["server"].poll() is None and time.monotonic() < t_end:
        mem = kit.proc_mem()
        for k, p in procs.items():
            pids = kit.group_pids(p.pid) | {p.pid}
            peaks[k] = max(peaks[k], sum(b for pid, b in mem.items() if pid in pids))
        time.sleep(1.0)
    res = {k: kit.finish(p, max(5, t_end - time.monotonic() + 30)) for k, p in procs.items()}
    raw = {k: {"rc": r[0], "out": r[1], "err": r[2][-800:], "nvml_peak": peaks[k]}
           for k, r in res.items()}
    raw["backstop"] = kit.backstop_lines(mark)
    kit.raw["steps"].setdefault("6 serving", {})[name] = raw
    return parse_kv(res["server"][1]), {k: parse_kv(r[1]) for k, r in res.items()
                                        if k != "server"}, peaks, raw


def run(kit):
    from kit import fmt_bytes, fmt_num, parse_kv
    S = "6 serving"
    secs = 3 * kit.scale if kit.dry else 6
    lead = 0 if kit.dry else 20  # torch import, weights, graph capture before the common start
    alone_t = kit.raw.get("alone_throughput")
    if alone_t is None:
        rc, out, err = kit.run(kit.under(["--memory", "16Gi"], kit.workload(
            "matmul", seconds=secs, start_at=None)), secs + 90)
        alone_t = kit.raw["alone_throughput"] = kit.throughput(parse_kv(out))
    if not alone_t:
        raise RuntimeError("no trainer throughput alone")
    if kit.ctx_charge is None:
        kit.context_row(S)
    charge = kit.ctx_charge or 0
    # The server's headroom: with both best effort each weighs half of the device; a trainer
    # guaranteed less leaves the server's bursts more (`--serving-trainer-compute`).
    share = getattr(kit.args, "serving_trainer_compute", None)
    trainer = ("trainer", ["--memory", "16Gi"] + (["--compute", str(share)] if share else []))
    beside = f"beside the trainer (guaranteed {share}%)" if share else "beside the trainer"
    plans = [("alone", [], []),
             (f"{beside}, normal priority", [], [trainer]),
             (f"{beside}, priority high", ["--priority", "high"], [trainer]),
             ("bare beside the bare trainer (no gpuslice: the driver's time-slicing)", None,
              [trainer]),
             ("three tenants: server high 20%, trainer 50%, batch 30%",
              ["--priority", "high", "--compute", "20"],
              [("trainer", ["--memory", "16Gi", "--compute", "50"]),
               ("batch", ["--memory", "16Gi", "--compute", "30"])])]
    # The simulator's timing on a shared 2-core host is judged by `cargo xtask bench share`; the
    # dry run proves the section runs end to end, so its timing rows get wider bands.
    tol, keep_left = (10, 0.8) if kit.dry else (5, 0.9)
    alone = None
    for name, sopts, others in plans:
        if kit.remaining() < lead + secs + 8:
            kit.row(S, name, "skipped", f"{lead + secs + 8:.0f}s of budget", "SKIP")
            continue
        sv, ov, peaks, raw = scenario(kit, name, sopts, others, secs, lead)
        if sv.get("itl_p99_ms") is None:
            kit.row(S, f"server {name}", f"failed rc={raw['server']['rc']}: "
                    f"{raw['server']['err'].strip()[-160:]}", "", "FAIL")
            continue
        if name == "alone":
            alone = sv
        rel = f" (p99 alone + {sv['itl_p99_ms'] - alone['itl_p99_ms']:.2f} ms)" \
            if alone and name != "alone" else ""
        kit.row(S, f"server {name}: TTFT p50/p99 ms; ITL p50/p99/max ms; tokens/s; requests",
                f"{sv['ttft_p50_ms']:.2f}/{sv['ttft_p99_ms']:.2f}; {sv['itl_p50_ms']:.2f}/"
                f"{sv['itl_p99_ms']:.2f}/{sv['itl_max_ms']:.2f}{rel}; {fmt_num(sv['tokens_per_s'])}"
                f"; {sv['requests']}", "", "info")
        if name == "alone":
            kit.row(S, "server alone: device ms per decode step / per prefill; device busy",
                    f"{sv.get('step_ms', 0):.3f} / {sv.get('prefill_ms', 0):.3f}; "
                    f"{sv.get('busy_frac', 0) * 100:.1f}%", "", "info")
            # A neighbour whose kernels run to completion and must not delay a step can use
            # only the time with no request in progress: its ceiling of what the server leaves.
            act, busy = sv.get("active_frac", 0), sv.get("busy_frac", 0)
            kit.row(S, "server alone: wall time with a request in progress; a run-to-completion "
                    "neighbour's ceiling of what the server leaves",
                    f"{act * 100:.1f}%; {(1 - act) / (1 - busy) * 100:.1f}%" if busy < 1
                    else "n/a", "", "info")
            continue
        leaves = 1 - (alone.get("busy_frac", 0) if alone else 0)
        for label, kv in ov.items():
            t = kit.throughput(kv)
            ach = t / alone_t if t else None
            if len(others) == 1:
                of_left = ach / leaves if ach is not None and leaves > 0 else None
                ok = of_left is not None and of_left >= keep_left
                kit.row(S, f"{name}: trainer throughput / alone; / device time the server leaves",
                        f"{ach * 100:.1f}% / {of_left * 100:.1f}%" if ach is not None
                        else "n/a", f">= {keep_left * 100:.0f}% of what the server leaves",
                        "PASS" if ok else "FAIL")
            else:
                g = 50 if label == "trainer" else 30
                ok = ach is not None and ach >= (g - tol) / 100
                kit.row(S, f"{name}: {label} (guaranteed {g}%) throughput / alone",
                        f"{ach * 100:.1f}%" if ach is not None else "n/a", f">= {g - tol}%",
                        "PASS" if ok else "FAIL")
        if alone and "priority high" in name:
            d = sv["itl_p99_ms"] - alone["itl_p99_ms"]
            # Issue #36's goal. On the simulator its timing is the benchmark's to judge (info).
            kit.row(S, "goal: high-priority p99 inter-token latency - alone", f"{d:+.2f} ms",
                    f"<= +{GOAL_MS} ms", "info" if kit.dry else
                    ("PASS" if d <= GOAL_MS else "FAIL"))
        if len(others) > 1:
            if alone:
                keep = float(sv["tokens_per_s"]) / float(alone["tokens_per_s"])
                kit.row(S, f"{name}: server tokens/s / alone", f"{keep * 100:.1f}%", ">= 95%",
                        "PASS" if keep >= 0.95 else "FAIL")
            over = [f"{k} {fmt_bytes(v)}" for k, v in peaks.items()
                    if v > (SERVER_CAP if k == "server" else TENANT_CAP) + charge]
            kit.row(S, f"{name}: NVML memory peaks vs cap + {charge >> 20} MiB charge",
                    "; ".join(f"{k} {fmt_bytes(v)}" for k, v in peaks.items()),
                    "each within its cap + charge", "FAIL" if over else "PASS")
        flags = raw["backstop"]
        kit.row(S, f"{name}: backstop lines", str(len(flags)), "0", "FAIL" if flags else "PASS")
