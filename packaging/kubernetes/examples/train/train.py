"""The example trainers' workload (packaging/kubernetes/examples): a small MLP trained on random
data with PyTorch on the GPU gpuslice assigned, for STEPS steps (0: until stopped). It prints what
the device reports (the slice's memory cap shows as the total) and its loss and step rate, so the
share of GPU time it gets is visible in the log. Only the image's own PyTorch is needed."""

import os
import time

import torch


def main() -> None:
    steps = int(os.environ.get("STEPS", "0"))
    width = int(os.environ.get("WIDTH", "4096"))
    batch = int(os.environ.get("BATCH", "256"))
    if not torch.cuda.is_available():
        raise SystemExit("train.py: no CUDA device (is the Pod's runtimeClassName gpuslice?)")
    dev = torch.device("cuda")
    free, total = torch.cuda.mem_get_info()
    print(f"device {torch.cuda.get_device_name(0)}: {free >> 20} MiB free of {total >> 20} MiB",
          flush=True)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step, t0 = 0, time.monotonic()
    while steps == 0 or step < steps:
        x = torch.randn(batch, width, device=dev)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 100 == 0:
            torch.cuda.synchronize()
            rate = 100 / (time.monotonic() - t0)
            print(f"step {step} loss {loss.item():.4f} {rate:.1f} steps/s", flush=True)
            t0 = time.monotonic()


if __name__ == "__main__":
    main()
