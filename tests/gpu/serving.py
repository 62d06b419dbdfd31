"""The kit's LLM-serving workload (issue #36): a decoder-only transformer with random weights, a
static KV cache, the decode step captured as one CUDA graph, requests arriving at random.

Imported by torch_workloads.py (`serve` subcommand); never imported by kit.py, which needs only the
standard library. Nothing is downloaded: the model is built from the config below.

Model (about 190 M parameters, ~380 MB of bf16 weights): 12 layers, width 1024, 16 heads of 64,
MLP 4096 (GELU), vocabulary 32 000 (tied embedding), learned positions, context 1024.

Server: up to --slots requests decode together (a static batch; an idle slot computes on and its
token is dropped, as a graph of fixed shape must). A request's prompt is prefilled eagerly into its
slot's cache when it is admitted (its first token is the prefill's); then every decode step is one
graph replay producing one token for every active slot, copied to the host (a server streams
tokens to its clients), so each step ends in a synchronisation.

Requests: Poisson arrivals at --rate per second, prompt length uniform in [32, 256] tokens (padded
to a multiple of 32 for the prefill, as servers bucket shapes; every bucket is run twice before the
window, so no kernel is loaded lazily inside it), output length uniform in [32, 128] tokens, from
a fixed seed (the same request trace in every scenario). Requests still running 2 s after the
window are cut and not counted as served.

Reported: time to first token (arrival to the prefill's token, so queueing included) p50/p99,
inter-token latency (time between a request's consecutive tokens) p50/p99/max, tokens/s, the
requests served, and the device time of one decode step and of a mean prefill measured alone
before the window (CUDA events), from which the fraction of the device the server used follows.
"""

import math
import random
import time
from collections import deque

LAYERS, WIDTH, HEADS, MLP, VOCAB, CTX = 12, 1024, 16, 4096, 32000, 1024
PROMPT = (32, 256)
OUTPUT = (32, 128)
BUCKET = 32  # prompts are padded to a multiple of this, so prefill has 8 shapes, all warmed up


def build(torch, slots, device="cuda", dtype=None):
    """The model's weights and the static KV cache, as plain tensors (no nn.Module: the decode
    step is one function over fixed buffers, which is what a CUDA graph captures)."""
    dtype = dtype or torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(36)

    def w(*shape):
        return (torch.randn(*shape, generator=g) / math.sqrt(shape[-1])).to(device, dtype)

    m = {"emb": w(VOCAB, WIDTH), "pos": w(CTX, WIDTH), "layers": []}
    for _ in range(LAYERS):
        m["layers"].append({"qkv": w(3 * WIDTH, WIDTH), "o": w(WIDTH, WIDTH),
                            "up": w(MLP, WIDTH), "down": w(WIDTH, MLP)})
    hd = WIDTH // HEADS
    m["k"] = torch.zeros(LAYERS, slots, HEADS, CTX, hd, device=device, dtype=dtype)
    m["v"] = torch.zeros_like(m["k"])
    return m


def norm(torch, x):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],))


def layer(torch, m, i, x, write, attend):
    """One transformer block over x [B, T, C]; `write(k, v)` stores this layer's keys and values
    in the cache, `attend(q)` returns the attention output [B, H, T, D]."""
    F = torch.nn.functional
    p = m["layers"][i]
    b, t, c = x.shape
    qkv = F.linear(norm(torch, x), p["qkv"]).view(b, t, 3, HEADS, c // HEADS)
    q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))  # [B, H, T, D]
    write(k, v)
    a = attend(q, k, v).transpose(1, 2).reshape(b, t, c)
    x = x + F.linear(a, p["o"])
    return x + F.linear(F.gelu(F.linear(norm(torch, x), p["up"])), p["down"])


def logits(torch, m, x):
    return torch.nn.functional.linear(norm(torch, x), m["emb"])


def prefill(torch, m, slot, prompt, last):
    """Fills slot's cache with prompt [T] (int64 on the device, padded after position `last`;
    the padding's keys lie beyond the decode mask until decode overwrites them); returns the
    first token, predicted at `last` (a 0-d device tensor)."""
    F = torch.nn.functional
    t = prompt.shape[0]
    x = (m["emb"][prompt] + m["pos"][:t]).unsqueeze(0)
    for i in range(LAYERS):
        def write(k, v, i=i):
            m["k"][i, slot, :, :t] = k[0]
            m["v"][i, slot, :, :t] = v[0]

        def attend(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = layer(torch, m, i, x, write, attend)
    return logits(torch, m, x[:, last]).argmax(-1)[0]


def decode(torch, m, tokens, pos, rows):
    """One decode step for every slot, in place: tokens [B] (in: last token, out: next token),
    pos [B] (the position being written; advanced by one). No host synchronisation: capturable."""
    F = torch.nn.functional
    x = (m["emb"][tokens] + m["pos"][pos]).unsqueeze(1)  # [B, 1, C]
    span = torch.arange(CTX, device=tokens.device)
    mask = (span.unsqueeze(0) <= pos.unsqueeze(1)).view(-1, 1, 1, CTX)  # [B, 1, 1, CTX]
    for i in range(LAYERS):
        def write(k, v, i=i):
            m["k"][i][rows, :, pos] = k[:, :, 0]
            m["v"][i][rows, :, pos] = v[:, :, 0]

        def attend(q, _k, _v, i=i):
            return F.scaled_dot_product_attention(q, m["k"][i], m["v"][i], attn_mask=mask)
        x = layer(torch, m, i, x, write, attend)
    tokens.copy_(logits(torch, m, x[:, 0]).argmax(-1))
    pos.add_(1).clamp_(max=CTX - 1)


def trace(rate, seconds, seed=36):
    """The request trace: [(arrival offset s, prompt length, output length)]."""
    r = random.Random(seed)
    out, t = [], 0.0
    while True:
        t += r.expovariate(rate)
        if t >= seconds:
            return out
        out.append((t, r.randint(*PROMPT), r.randint(*OUTPUT)))


def pct(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round((len(s) - 1) * p))]


class Server:
    def __init__(self, torch, slots, use_graph=True, device="cuda"):
        self.torch, self.slots, self.device = torch, slots, device
        self.m = build(torch, slots, device)
        self.tokens = torch.zeros(slots, dtype=torch.long, device=device)
        self.pos = torch.zeros(slots, dtype=torch.long, device=device)
        self.rows = torch.arange(slots, device=device)
        self.host = torch.zeros(slots, dtype=torch.long, pin_memory=device == "cuda")
        self.graph = None
        if use_graph:
            self.capture()
        for _ in range(2):  # every prefill shape once before the window: no lazy loading in it
            for b in range(BUCKET, PROMPT[1] + BUCKET, BUCKET):
                self.admit(0, b)
        self.pos.zero_()

    def step_eager(self):
        decode(self.torch, self.m, self.tokens, self.pos, self.rows)

    def capture(self):
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream, as PyTorch's docs ask
            for _ in range(3):
                self.step_eager()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.step_eager()
        self.pos.zero_()

    def step(self):
        """One decode step; returns the next tokens on the host (synchronises)."""
        if self.graph is not None:
            self.graph.replay()
        else:
            self.step_eager()
        self.host.copy_(self.tokens, non_blocking=True)
        if self.device == "cuda":
            self.torch.cuda.current_stream().synchronize()
        return self.host

    def admit(self, slot, prompt_len):
        torch = self.torch
        padded = -(-prompt_len // BUCKET) * BUCKET
        prompt = torch.randint(0, VOCAB, (padded,), device=self.device)
        with torch.inference_mode():
            first = prefill(torch, self.m, slot, prompt, prompt_len - 1)
        self.tokens[slot] = first
        self.pos[slot] = prompt_len
        return int(first)  # the first token reaches the host: a synchronisation

    def device_times(self):
        """Device ms of one decode step and of one prefill of the mean prompt, measured alone
        with back-to-back launches between two CUDA events (no host gap inside)."""
        torch = self.torch
        if self.device != "cuda":
            return 0.0, 0.0
        mean = sum(PROMPT) // 2
        prompt = torch.randint(0, VOCAB, (-(-mean // BUCKET) * BUCKET,), device=self.device)

        def one_prefill():
            with torch.inference_mode():
                prefill(torch, self.m, 0, prompt, mean - 1)
        res = []
        for fn, n in ((self.graph.replay if self.graph else self.step_eager, 50),
                      (one_prefill, 10)):
            fn()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                fn()
            e1.record()
            e1.synchronize()
            res.append(e0.elapsed_time(e1) / n)
        self.pos.zero_()
        return res[0], res[1]


def serve(torch, rate, seconds, slots, start_at_fn, use_graph=True, device="cuda"):
    """Runs the trace against a fresh server; returns the key=value dict the kit prints."""
    srv = Server(torch, slots, use_graph, device)
    step_ms, prefill_ms = srv.device_times()
    reqs = deque(trace(rate, seconds))
    start_at_fn()
    t0 = time.perf_counter()
    waiting, free = deque(), list(range(slots))
    active = {}  # slot -> [tokens left, time of last token]
    ttft, itl, tokens, served, steps, prefills = [], [], 0, 0, 0, 0
    # Wall time with a request in prefill or decode (host gaps between steps included): a
    # neighbour that must not run beside a step can use at most the rest.
    active_s, busy_since = 0.0, None
    while reqs or waiting or active:
        now = time.perf_counter() - t0
        if now >= seconds + 2.0:  # the window is over: requests still running are cut
            break
        while reqs and reqs[0][0] <= now:
            waiting.append(reqs.popleft())
        while waiting and free:
            arr, plen, olen = waiting.popleft()
            slot = free.pop()
            if busy_since is None:
                busy_since = time.perf_counter()
            srv.admit(slot, plen)
            prefills += 1
            t = time.perf_counter() - t0
            ttft.append((t - arr) * 1e3)
            tokens += 1
            active[slot] = [olen - 1, t]
        if not active:
            if reqs:
                time.sleep(max(0.0, min(0.05, reqs[0][0] - (time.perf_counter() - t0))))
            continue
        srv.step()
        steps += 1
        t = time.perf_counter() - t0
        for slot in list(active):
            left, last = active[slot]
            itl.append((t - last) * 1e3)
            tokens += 1
            if left <= 1:
                del active[slot]
                free.append(slot)
                served += 1
            else:
                active[slot] = [left - 1, t]
        if not active and busy_since is not None:
            active_s += time.perf_counter() - busy_since
            busy_since = None
    if busy_since is not None:
        active_s += time.perf_counter() - busy_since
    el = time.perf_counter() - t0
    busy = (steps * step_ms + prefills * prefill_ms) / 1e3 / el if el else 0.0
    return {"requests": served, "tokens": tokens, "elapsed_s": f"{el:.3f}",
            "tokens_per_s": f"{tokens / el:.1f}", "ttft_p50_ms": f"{pct(ttft, 0.5):.3f}",
            "ttft_p99_ms": f"{pct(ttft, 0.99):.3f}", "itl_p50_ms": f"{pct(itl, 0.5):.3f}",
            "itl_p99_ms": f"{pct(itl, 0.99):.3f}", "itl_max_ms": f"{max(itl or [0]):.3f}",
            "steps": steps, "step_ms": f"{step_ms:.4f}", "prefill_ms": f"{prefill_ms:.4f}",
            "busy_frac": f"{busy:.4f}", "active_frac": f"{active_s / el if el else 0.0:.4f}",
            "graph": int(srv.graph is not None)}
