"""cuda.bindings.driver: cuMemAllocAsync from the device's default pool stops at exactly the cap;
memory freed with cuMemFreeAsync returns once cuStreamSynchronize has run."""

from conftest import CHUNK, cu, expected_count, fill, mem_info, ok, say


def reserved(pool):
    attr = cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
    return int(ok(cu.cuMemPoolGetAttribute(pool, attr)))


def test_pool_alloc_stops_at_the_cap_and_sync_returns_it(ctx):
    pool = ok(cu.cuDeviceGetDefaultMemPool(ctx))
    stream = ok(cu.cuStreamCreate(0))
    free, _ = mem_info()
    want = expected_count(free)
    ptrs = fill(lambda: cu.cuMemAllocAsync(CHUNK, stream), want)
    ok(cu.cuStreamSynchronize(stream))
    assert reserved(pool) == want * CHUNK
    for p in ptrs:
        ok(cu.cuMemFreeAsync(p, stream))
    # The default pool's release threshold is 0: synchronising the stream gives it all back.
    ok(cu.cuStreamSynchronize(stream))
    assert reserved(pool) == 0, "cuStreamSynchronize left pool memory reserved"
    assert mem_info()[0] == free, "pool memory did not return after cuStreamSynchronize"
    again = [ok(cu.cuMemAllocAsync(CHUNK, stream)) for _ in range(want)]
    for p in again:
        ok(cu.cuMemFreeAsync(p, stream))
    ok(cu.cuStreamSynchronize(stream))
    assert mem_info()[0] == free
    ok(cu.cuStreamDestroy(stream))
    say(
        f"cuMemAllocAsync (default pool): {want} x 128 MiB, the next one "
        "CUDA_ERROR_OUT_OF_MEMORY; cuMemFreeAsync + cuStreamSynchronize returned it, all again"
    )
