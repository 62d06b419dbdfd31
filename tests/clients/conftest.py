"""Shared helpers for the clients suite (cargo xtask test clients; docs/clients.md).

The suite runs every script three times against the simulated GPU, in a fresh simulated node
each time, and tells the scripts which run this is and what to expect:

  GPUSLICE_CLIENTS_MODE          bare         the simulator alone
                                 passthrough  LD_PRELOAD=libgpuslice.so, no request
                                 capped       LD_PRELOAD=libgpuslice.so, GPUSLICE_MEMORY=<cap>
  GPUSLICE_CLIENTS_DEVICE_BYTES  the simulated device's memory (its GPUSLICE_SIM_DEVICES mem=)
  GPUSLICE_CLIENTS_CAP_BYTES     the cap, only in the capped run
  GPUSLICE_CLIENTS_RESULTS       a file every check's one-line result is appended to: the suite
                                 requires the passthrough run's lines to equal the bare run's
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
MODE = os.environ["GPUSLICE_CLIENTS_MODE"]
assert MODE in ("bare", "passthrough", "capped"), MODE
assert (CAP_BYTES is not None) == (MODE == "capped"), "a cap is given exactly in the capped run"


def say(what):
    """Records one checked result: printed, and appended to the results file."""
    print(f"\n    [{MODE}] {what}", end="")
    with open(os.environ["GPUSLICE_CLIENTS_RESULTS"], "a") as results:
        results.write(what + "\n")


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


def fill(alloc, want):
    """Calls alloc() -> (CUresult, value) until it fails. It must stop after exactly `want`
    successes (the whole cap in the capped run) with CUDA_ERROR_OUT_OF_MEMORY; returns the values."""
    got = []
    while True:
        err, value = alloc()
        if err != cu.CUresult.CUDA_SUCCESS:
            break
        got.append(value)
        assert len(got) <= want, "allocated past what is free"
    assert err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, f"refused with {err!r}"
    assert len(got) == want
    if CAP_BYTES is not None:
        assert len(got) * CHUNK == CAP_BYTES
    return got


def interposer_loaded():
    with open("/proc/self/maps") as maps:
        return "libgpuslice.so" in maps.read()


@pytest.fixture(scope="session", autouse=True)
def preload_as_told():
    """The interposer is mapped exactly in the runs that preload it."""
    assert interposer_loaded() == (MODE != "bare"), f"libgpuslice.so mapping wrong for {MODE}"


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped check proves nothing: the clients suite counts it as a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped, which the clients suite does not allow: {report.longrepr}"
