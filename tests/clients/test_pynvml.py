"""nvidia-ml-py (pynvml): nvmlDeviceGetMemoryInfo reports the cap inside the slice, the device's
memory outside it; memory allocated through the driver shows as used."""

import pynvml

from conftest import CHUNK, DEVICE_BYTES, TOTAL, cu, ok, say


def test_memory_info_total(ctx):
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert v1.total == TOTAL and v2.total == TOTAL
        assert v1.used + v1.free == TOTAL
        say(f"nvmlDeviceGetMemoryInfo (v1, v2) total = {v1.total} (device {DEVICE_BYTES})")

        ptrs = [ok(cu.cuMemAlloc(CHUNK)) for _ in range(3)]
        after = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert after.used - v1.used == 3 * CHUNK
        assert after.total == TOTAL
        for p in ptrs:
            ok(cu.cuMemFree(p))
        assert pynvml.nvmlDeviceGetMemoryInfo(handle).used == v1.used
        say("nvml used grows by 3 x 128 MiB allocated with cuMemAlloc and returns after the frees")
    finally:
        pynvml.nvmlShutdown()
