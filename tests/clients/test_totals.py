"""cuda.bindings.driver: cuDeviceTotalMem and cuMemGetInfo report the cap, or the whole device."""

from conftest import DEVICE_BYTES, TOTAL, CAP_BYTES, cu, mem_info, ok, say


def test_driver_version_is_the_simulators(ctx):
    assert ok(cu.cuDriverGetVersion()) == 12080
    say("cuDriverGetVersion = 12080")


def test_device_total_mem(ctx):
    total = ok(cu.cuDeviceTotalMem(ctx))
    assert total == TOTAL
    say(f"cuDeviceTotalMem = {total} (device {DEVICE_BYTES})")


def test_mem_get_info(ctx):
    free, total = mem_info()
    assert total == TOTAL
    if CAP_BYTES is not None:
        # The context's own overhead is not charged to the slice (docs/interposer.md).
        assert free == CAP_BYTES
    else:
        assert 0 < free < total
    say(f"cuMemGetInfo = free {free}, total {total}")
