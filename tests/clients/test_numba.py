"""numba-cuda: the context's memory info reports the cap; device arrays stop at the cap.

Only the driver API is used: numba compiles kernels with NVVM (libnvvm), which the simulated
node does not have, so nothing here launches a @cuda.jit kernel (docs/clients.md)."""

import numpy as np
import pytest
from numba import cuda
from numba.cuda.cudadrv.driver import CudaAPIError

from conftest import CAP_BYTES, CHUNK, TOTAL, expected_count, say


def flush(context):
    """Runs numba's deferred frees now. Device memory is freed through the memory manager's own
    queue (not context.deallocations), which flushes by itself only past 10 pending frees or
    20 % of the device's reported total memory."""
    context.memory_manager.deallocations.clear()


@pytest.fixture
def nbctx():
    context = cuda.current_context()
    yield context
    flush(context)


def test_device_is_the_simulated_one(nbctx):
    name = cuda.get_current_device().name
    name = name.decode() if isinstance(name, bytes) else name
    assert name == "NVIDIA H100 80GB HBM3"
    say(f"numba sees {name}")


def test_memory_info_reports_the_cap(nbctx):
    free, total = nbctx.get_memory_info()
    assert total == TOTAL
    if CAP_BYTES is not None:
        assert free == CAP_BYTES
    say(f"numba get_memory_info = free {free}, total {total}")


def test_device_arrays_stop_at_the_cap(nbctx):
    free, _ = nbctx.get_memory_info()
    want = expected_count(free)
    arrays = []
    with pytest.raises(CudaAPIError) as refused:
        while True:
            arrays.append(cuda.device_array(CHUNK, dtype=np.uint8))
            assert len(arrays) <= want, "allocated past what is free"
    assert "CUDA_ERROR_OUT_OF_MEMORY" in str(refused.value), refused.value
    assert len(arrays) == want
    del arrays
    flush(nbctx)
    assert nbctx.get_memory_info()[0] == free, "freed device arrays did not return the memory"
    say(f"numba device_array: {want} x 128 MiB, the next one CUDA_ERROR_OUT_OF_MEMORY; freed")
