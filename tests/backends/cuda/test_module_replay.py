"""A CUDA module's call on static device arrays replays launches marshalled once per set of
argument pointers.  Without a GPU: the kernels run on the CPU through ``simt`` and the driver
is a stand-in that launches them, so the values of replayed calls are checked against numpy."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.backends.cuda import module as cuda_module
from loopweave.backends.cuda.ndarray import DeviceArray


class _SimtDriver:
    """The driver calls of the replay path, launching the simt build of the kernels."""
    device_index = 0

    def __init__(self):
        self.launches = []

    def make_current(self):
        pass

    def synchronize(self):
        pass

    def launch_prepared(self, launch, stream=None):
        self.launches.append(launch)
        launch.fn(*launch.grid, *launch.block, launch.params)


def _view(a: np.ndarray) -> DeviceArray:
    """Host memory posing as device memory (the stand-in driver runs kernels on the CPU)."""
    return DeviceArray(a.ctypes.data, a.shape, a.dtype, owned=False, keepalive=a)


@pytest.fixture
def matmul(simt, monkeypatch):
    A, B = lw.placeholder((64, 32), name="A"), lw.placeholder((32, 64), name="B")
    C = nn_ops.matmul(A, B)
    f = lw.build(nn_ops.schedule(C, "cuda"), [A, B, C], target="cuda:sm_90")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32), dtype="float32"), rng.standard_normal((32, 64), dtype="float32")
    c = np.zeros((64, 64), "float32")
    simt(f)(a, b, c)                      # loads the kernels into f._functions
    f._module = object()                  # "loaded": the stand-in driver loads nothing
    drv = _SimtDriver()
    monkeypatch.setattr(cuda_module, "get_driver", lambda: drv)
    return f, drv, a, b


def test_replayed_calls_compute_the_product_and_marshal_once_per_pointer_set(matmul):
    f, drv, a, b = matmul
    assert f._replayable
    outs = [np.zeros((64, 64), "float32") for _ in range(2)]
    A, B = _view(a), _view(b)
    for out in (outs[0], outs[0], outs[1], outs[0]):
        out[:] = 0
        f(A, B, _view(out))
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert len(f._replays) == 2                         # two output pointers: two marshalled sets
    first, again = drv.launches[0], drv.launches[len(drv.launches) // 4]
    assert first is again                               # the second call replayed the first's launch


def test_replay_keeps_a_bounded_number_of_pointer_sets(matmul, monkeypatch):
    f, drv, a, b = matmul
    monkeypatch.setattr(cuda_module, "REPLAY_SETS", 2)
    outs = [np.zeros((64, 64), "float32") for _ in range(3)]
    for out in outs:
        f(_view(a), _view(b), _view(out))
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    assert len(f._replays) == 2 and tuple(v.ctypes.data for v in (a, b, outs[0])) not in f._replays


def test_calls_the_replay_cannot_take_go_the_checked_way(matmul):
    f, drv, a, b = matmul
    with pytest.raises(lw.ArgumentError, match="'B'.*shape"):
        f(_view(a), _view(b[:16].copy()), _view(np.zeros((64, 64), "float32")))
    assert not f._replays and not drv.launches
    buf = np.zeros((64, 64), "float32")
    assert not f._replay((_view(a), _view(b), _view(buf), _view(buf)))     # wrong count: not replayed


def test_host_programs_that_allocate_are_not_replayed():
    """An intermediate between two kernels is allocated per call: such a module is never replayed."""
    X = lw.placeholder((32,), name="X")
    stages = [lw.compute((32,), lambda i: X[i] + 1, name="T")]
    stages.append(lw.compute((32,), lambda i: stages[0][31 - i], name="Y"))
    s = lw.create_schedule(stages[-1])
    for t in stages:
        block, thread = s[t].split(t.op.axis[0], nparts=2)
        s[t].bind(block, lw.thread_axis("blockIdx.x"))
        s[t].bind(thread, lw.thread_axis("threadIdx.x"))
    f = lw.build(s, [X, stages[-1]], target="cuda:sm_90")
    assert "allocate(" in f.get_source("lowered") and not f._replayable
