"""cuda.bindings.driver: cuMemCreate + cuMemAddressReserve + cuMemMap of 128 MiB handles stop at
exactly the cap; unmapping and releasing return the memory."""

from conftest import CHUNK, cu, expected_count, fill, mem_info, ok, say


def props(dev):
    p = cu.CUmemAllocationProp()
    p.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = int(dev)
    return p


def access(dev):
    a = cu.CUmemAccessDesc()
    a.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    a.location.id = int(dev)
    a.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return a


def test_vmm_stops_at_the_cap(ctx):
    prop = props(ctx)
    gran = ok(cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
    assert CHUNK % gran == 0
    free, _ = mem_info()
    want = expected_count(free)

    def create_and_map():
        err, handle = cu.cuMemCreate(CHUNK, prop, 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return err, None
        va = ok(cu.cuMemAddressReserve(CHUNK, 0, 0, 0))
        ok(cu.cuMemMap(va, CHUNK, 0, handle, 0))
        ok(cu.cuMemSetAccess(va, CHUNK, [access(ctx)], 1))
        return err, (va, handle)

    mapped = fill(create_and_map, want)
    for va, handle in mapped:
        ok(cu.cuMemUnmap(va, CHUNK))
        ok(cu.cuMemRelease(handle))
        ok(cu.cuMemAddressFree(va, CHUNK))
    assert mem_info()[0] == free, "cuMemRelease did not return the memory"
    again = [ok(cu.cuMemCreate(CHUNK, prop, 0)) for _ in range(want)]
    for handle in again:
        ok(cu.cuMemRelease(handle))
    say(
        f"cuMemCreate + cuMemAddressReserve + cuMemMap: {want} x 128 MiB, the next cuMemCreate "
        "CUDA_ERROR_OUT_OF_MEMORY; unmapped, released, all again"
    )
