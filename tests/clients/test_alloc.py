"""cuda.bindings.driver: 128 MiB cuMemAlloc calls stop at exactly the cap; frees return memory."""

from conftest import CHUNK, cu, expected_count, fill, mem_info, ok, say


def test_mem_alloc_stops_at_the_cap(ctx):
    free, _ = mem_info()
    want = expected_count(free)
    ptrs = fill(lambda: cu.cuMemAlloc(CHUNK), want)
    assert mem_info()[0] < CHUNK
    for p in ptrs:
        ok(cu.cuMemFree(p))
    assert mem_info()[0] == free, "cuMemFree did not return the memory"
    # What was freed can be allocated again.
    again = [ok(cu.cuMemAlloc(CHUNK)) for _ in range(want)]
    for p in again:
        ok(cu.cuMemFree(p))
    say(f"cuMemAlloc: {want} x 128 MiB, the next one CUDA_ERROR_OUT_OF_MEMORY; freed, all again")
