"""PyTorch workloads for the real-GPU kit (run as subprocesses by kit.py, never imported by it).

Each subcommand prints one line of `key=value` pairs (no spaces inside values), the same shape
as `gpuslice-workload`, so the harness parses both the same way:

  info                              torch.cuda.mem_get_info() and the device's total memory
  fill   --chunk-mib N --hold-s S   allocate N MiB tensors until torch.OutOfMemoryError
  matmul --n N --seconds S          bf16 N x N matmul loop, synchronize every --sync-every
                                    (--warm-s W: run W s unmeasured first)
  launch --seconds S                a tiny elementwise op on a 1-element tensor: time per launch
  infer  --rate R --seconds S       batch-1 MLP forward at a fixed rate: latency percentiles
  graph  --seconds S                capture ten bf16 GEMMs with torch.cuda.graph (after
                                    --start-at, so a neighbour is running), then replay: GEMMs/s
  compile --seconds S               torch.compile(mode="reduce-overhead") of a small MLP (after
                                    --start-at), checked against eager, then run
  cupyfill --chunk-mib N            CuPy's MemoryAsyncPool: allocate N MiB until OutOfMemoryError
  serve  --rate R --seconds S       an LLM server (serving.py): Poisson requests, graph-captured
                                    decode; time to first token, inter-token latency, tokens/s

`--start-at T` (Unix time) makes a timed workload wait, after CUDA init and warm-up, until T,
so processes started together measure the same window despite different import times.
"""

import argparse
import os
import sys
import time


def wait_until(start_at):
    if start_at:
        delay = start_at - time.time()
        if delay > 0:
            time.sleep(delay)


def oom_type(torch):
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def cmd_info(torch, a):
    free, total = torch.cuda.mem_get_info()
    p = torch.cuda.get_device_properties(0)
    name = p.name.replace(" ", "_")
    print(f"name={name} meminfo_free={free} meminfo_total={total} props_total={p.total_memory} "
          f"torch={torch.__version__} cuda={torch.version.cuda}", flush=True)


def cmd_fill(torch, a):
    oom = oom_type(torch)
    chunk = a.chunk_mib << 20
    held = []
    refusal = "none"
    detail = ""
    try:
        while True:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            if len(held) > 100000:
                break
    except oom as e:
        refusal = "OutOfMemoryError"
        detail = str(e).split("\n")[0][:120]
    except Exception as e:  # a CUDA error other than OOM is what the kit must report
        refusal = type(e).__name__
        detail = str(e).split("\n")[0][:120]
    free, total = torch.cuda.mem_get_info()
    print(f"allocations={len(held)} bytes={len(held) * chunk} refusal={refusal} "
          f"free_after={free} total={total} reserved={torch.cuda.memory_reserved()} "
          f"alloc_conf={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', 'default')}", flush=True)
    if detail:
        print(f"# {detail}", file=sys.stderr)
    time.sleep(a.hold_s)
    del held
    torch.cuda.synchronize()
    return 0 if refusal == "OutOfMemoryError" else 1


def cmd_matmul(torch, a):
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        z = x @ y
    torch.cuda.synchronize()
    wait_until(a.start_at)
    warm_end = time.perf_counter() + a.warm_s  # running, not yet measured
    while time.perf_counter() < warm_end:
        for _ in range(a.sync_every):
            z = x @ y
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    iters = 0
    while True:
        for _ in range(a.sync_every):
            z = x @ y
        torch.cuda.synchronize()
        iters += a.sync_every
        el = time.perf_counter() - t0
        if el >= a.seconds:
            break
    del z
    tflops = 2 * a.n ** 3 * iters / el / 1e12
    print(f"iters={iters} elapsed_s={el:.3f} iters_per_s={iters / el:.3f} tflops={tflops:.2f}",
          flush=True)


def cmd_launch(torch, a):
    x = torch.zeros(1, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    wait_until(a.start_at)
    n = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(1000):
            x.add_(1)
        torch.cuda.synchronize()
        n += 1000
        el = time.perf_counter() - t0
        if el >= a.seconds:
            break
    print(f"launches={n} elapsed_s={el:.3f} us_per_launch={el / n * 1e6:.3f}", flush=True)


def cmd_infer(torch, a):
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(),
                          nn.Linear(4096, 1024)).to("cuda", torch.bfloat16).eval()
    x = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        for _ in range(20):
            model(x)
        torch.cuda.synchronize()
        wait_until(a.start_at)
        period = 1.0 / a.rate
        lat = []
        start = time.perf_counter()
        nxt = start
        while time.perf_counter() - start < a.seconds:
            now = time.perf_counter()
            if now < nxt:
                time.sleep(nxt - now)
            t = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            lat.append((time.perf_counter() - t) * 1e3)
            nxt += period
    lat.sort()

    def pct(p):
        return lat[round((len(lat) - 1) * p)]

    print(f"requests={len(lat)} p50_ms={pct(0.5):.3f} p99_ms={pct(0.99):.3f} "
          f"max_ms={lat[-1]:.3f}", flush=True)


def cmd_graph(torch, a):
    n = a.n
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on a side stream, as PyTorch's docs ask
        for _ in range(3):
            y = x
            for i in range(10):
                y = y @ w[i % 2]
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    wait_until(a.start_at)
    g = torch.cuda.CUDAGraph()
    t = time.perf_counter()
    try:
        with torch.cuda.graph(g):  # default capture_error_mode="global"
            y = x
            for i in range(10):
                y = y @ w[i % 2]
    except Exception as e:  # the kit reports the failure as a row
        msg = str(e).split("\n")[0][:160].replace(" ", "_")
        print(f"captured=0 error={msg}", flush=True)
        return 1
    cap_ms = (time.perf_counter() - t) * 1e3
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    reps = 0
    while True:
        g.replay()
        reps += 1
        if reps % 2 == 0:
            torch.cuda.synchronize()
            el = time.perf_counter() - t0
            if el >= a.seconds:
                break
    print(f"captured=1 capture_ms={cap_ms:.1f} replays={reps} elapsed_s={el:.3f} "
          f"iters_per_s={reps * 10 / el:.3f}", flush=True)
    return 0


def cmd_compile(torch, a):
    nn = torch.nn
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda().eval()
    x = torch.randn(8, 512, device="cuda")
    wait_until(a.start_at)
    t = time.perf_counter()
    with torch.inference_mode():
        ref = model(x)
        cm = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):  # cudagraph trees record on the second or third call
            out = cm(x)
        torch.cuda.synchronize()
        comp_s = time.perf_counter() - t
        err = (out - ref).abs().max().item()
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < a.seconds:
            out = cm(x)
            n += 1
        torch.cuda.synchronize()
    skips = 0
    try:
        from torch._dynamo.utils import counters
        skips = sum(counters["inductor"].get(k, 0) for k in counters["inductor"]
                    if "cudagraph_skip" in k)
    except Exception:  # noqa: BLE001 - counters moved between versions; the row says n/a
        skips = -1
    print(f"compiled=1 compile_s={comp_s:.1f} max_abs_err={err:.2e} calls={n} "
          f"cudagraph_skips={skips}", flush=True)
    return 0 if err < 1e-2 else 1


def cmd_cupyfill(_torch, a):
    import cupy
    cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    chunk = a.chunk_mib << 20
    held = []
    refusal = "none"
    try:
        while len(held) < 100000:
            held.append(cupy.empty(chunk, dtype=cupy.uint8))
    except cupy.cuda.memory.OutOfMemoryError:
        refusal = "OutOfMemoryError"
    except Exception as e:  # noqa: BLE001 - reported, not raised
        refusal = type(e).__name__
    free, total = cupy.cuda.runtime.memGetInfo()
    print(f"allocations={len(held)} bytes={len(held) * chunk} refusal={refusal} "
          f"free_after={free} total={total} alloc_conf=cupy_async", flush=True)
    time.sleep(a.hold_s)
    del held
    return 0 if refusal == "OutOfMemoryError" else 1


def cmd_serve(torch, a):
    import serving  # beside this file

    kv = serving.serve(torch, a.rate, a.seconds, a.slots, lambda: wait_until(a.start_at),
                       use_graph=not a.no_graph)
    print(" ".join(f"{k}={v}" for k, v in kv.items()), flush=True)
    return 0 if kv["requests"] > 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info")
    f = sub.add_parser("fill")
    f.add_argument("--chunk-mib", type=int, default=512)
    f.add_argument("--hold-s", type=float, default=2.0)
    c = sub.add_parser("cupyfill")
    c.add_argument("--chunk-mib", type=int, default=512)
    c.add_argument("--hold-s", type=float, default=2.0)
    for name in ("matmul", "launch", "infer", "graph", "compile", "serve"):
        s = sub.add_parser(name)
        s.add_argument("--seconds", type=float, default=5.0)
        s.add_argument("--start-at", type=float, default=0.0)
        if name in ("matmul", "graph"):
            s.add_argument("--n", type=int, default=8192)
            s.add_argument("--sync-every", type=int, default=10)
            s.add_argument("--warm-s", type=float, default=0.0,
                           help="run this long after --start-at before measuring")
        if name == "infer":
            s.add_argument("--rate", type=float, default=50.0)
        if name == "serve":
            s.add_argument("--rate", type=float, default=10.0, help="requests per second")
            s.add_argument("--slots", type=int, default=8, help="requests decoded together")
            s.add_argument("--no-graph", action="store_true", help="decode eagerly")
    a = p.parse_args()
    if a.cmd == "cupyfill":  # CuPy alone: no PyTorch context beside it
        return cmd_cupyfill(None, a)
    import torch  # only here: the harness itself never needs PyTorch

    if not torch.cuda.is_available():
        print("error=cuda_unavailable", flush=True)
        return 3
    fn = {"info": cmd_info, "fill": cmd_fill, "matmul": cmd_matmul, "launch": cmd_launch,
          "infer": cmd_infer, "graph": cmd_graph, "compile": cmd_compile, "serve": cmd_serve}[a.cmd]
    return fn(torch, a) or 0


if __name__ == "__main__":
    sys.exit(main())
