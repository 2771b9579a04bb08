"""Shared test plumbing: GPU tests skip cleanly without a GPU; GPU schedules can be emulated on the CPU."""
import atexit
import os
import shutil
import tempfile

import pytest

# As in .ci/run: compiled kernels cached for this run only, unless the caller names a cache.  A
# kernel found in a warm cache is loaded without its lowered IR, which some tests read, so a second
# local run failed where CI (always cold) passed; and test kernels stay out of the user's cache.
if "LOOPWEAVE_CACHE_DIR" not in os.environ:
    os.environ["LOOPWEAVE_CACHE_DIR"] = tempfile.mkdtemp(prefix="loopweave-tests-")
    atexit.register(shutil.rmtree, os.environ["LOOPWEAVE_CACHE_DIR"], True)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden printed IR under tests/lowering/golden/ instead of comparing with it")
    parser.addoption("--no-verify-ir", action="store_true", default=False,
                     help="do not check the loop IR after every lowering pass (lowering/verify.py)")


def pytest_configure(config):
    """Every lowering in the tests checks its IR after each pass: a pass that breaks an invariant
    fails there, naming itself (production lowering skips the check)."""
    if not config.getoption("--no-verify-ir"):
        from loopweave.lowering.verify import set_verify
        set_verify(True)


@pytest.fixture
def update_golden(request):
    """Whether ``pytest --update-golden`` asked to rewrite golden files rather than compare with them."""
    return request.config.getoption("--update-golden")


def _gpu_reason():
    from loopweave.backends.cuda.driver import get_driver
    from loopweave.errors import BuildError
    try:
        get_driver()
        return None
    except BuildError as exc:
        return str(exc).split(";")[0]


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = _gpu_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def cuda_compilers():
    """The CUDA compilers present (NVRTC, nvcc); skips the test when there is none."""
    from loopweave.backends.cuda.compiler import find_nvcc, find_nvrtc
    found = [name for name, probe in (("nvrtc", find_nvrtc), ("nvcc", find_nvcc)) if probe()]
    if not found:
        pytest.skip("no CUDA compiler (NVRTC or nvcc) on this machine")
    return found


@pytest.fixture
def emulate():
    """``emulate(s, args)``: a CPU build of a GPU schedule, its thread-bound loops run as serial loops.

    Sequentially, a GPU schedule computes the same values as on the GPU: a cooperative
    copy into shared memory is done whole by every thread instead of in parts, and
    barriers are no-ops.  So the values a GPU schedule computes (tiling, guards,
    caches, bound inference) are checked against numpy without a GPU.  What only the
    GPU's parallel execution shows (shared regions per block rather than per thread,
    barrier placement) is checked structurally in tests/lowering/test_gpu_lowering.py.
    """
    from loopweave.backends.cuda.emulate import emulating_build
    return emulating_build


@pytest.fixture(params=["x86-64-v3", "x86-64-v4"])
def x86_level(request):
    """An x86 target of each vector width (AVX2: 8 float lanes, AVX-512: 16), made current for the
    test (``compiling_for``), for tests of schedules that depend on the width: each width's
    structure is checked on every host, and its code run where ``target.runs_here()``."""
    from loopweave.target import compiling_for, parse_target
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={request.param}")
    with compiling_for(target):
        yield target
