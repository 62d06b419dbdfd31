"""Shared helpers for the clients suite (cargo xtask test clients; docs/clients.md).

The suite runs every script twice against the simulated GPU: once bare, once under the
interposer (LD_PRELOAD=libgpuslice.so, GPUSLICE_MEMORY). It tells the scripts what to expect:

  GPUSLICE_CLIENTS_DEVICE_BYTES  the simulated device's memory (its GPUSLICE_SIM_DEVICES mem=)
  GPUSLICE_CLIENTS_CAP_BYTES     the cap, only in the run under the interposer
"""

import os

import pytest
from cuda.bindings import driver as cu

MiB = 1 << 20
CHUNK = 128 * MiB

DEVICE_BYTES = int(os.environ["GPUSLICE_CLIENTS_DEVICE_BYTES"])
CAP_BYTES = int(os.environ["GPUSLICE_CLIENTS_CAP_BYTES"]) if "GPUSLICE_CLIENTS_CAP_BYTES" in os.environ else None
# What every memory query must report as the total: the cap inside a slice, else the device.
TOTAL = CAP_BYTES if CAP_BYTES is not None else DEVICE_BYTES
MODE = f"capped {CAP_BYTES // MiB} MiB" if CAP_BYTES is not None else "bare"


def say(what):
    """One line of the suite's output: what was checked, and in which mode."""
    print(f"\n    [{MODE}] {what}", end="")


def ok(result):
    """Unwraps a cuda.bindings call's (CUresult, values...) tuple, failing on an error."""
    err, *values = result
    assert err == cu.CUresult.CUDA_SUCCESS, f"driver returned {err!r}"
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def mem_info():
    """(free, total) from cuMemGetInfo."""
    return ok(cu.cuMemGetInfo())


def expected_count(free):
    """How many CHUNK allocations fit: 8 under a 1 GiB cap; what is free on the bare device."""
    if CAP_BYTES is not None:
        assert free == CAP_BYTES, f"free {free} != cap {CAP_BYTES} before any allocation"
    return free // CHUNK


def interposer_loaded():
    with open("/proc/self/maps") as maps:
        return "libgpuslice.so" in maps.read()


@pytest.fixture(scope="session", autouse=True)
def preload_as_told():
    """The run under a cap really has the interposer mapped, and the bare run really has not."""
    assert interposer_loaded() == (CAP_BYTES is not None), "LD_PRELOAD does not match the mode"


@pytest.fixture
def ctx():
    """Device 0's primary context, current on this thread."""
    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    context = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(context))
    yield dev
    ok(cu.cuCtxSynchronize())
    # Not current any more before it is released, as a well-behaved client leaves it.
    ok(cu.cuCtxSetCurrent(cu.CUcontext(0)))
    ok(cu.cuDevicePrimaryCtxRelease(dev))
