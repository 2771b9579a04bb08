"""The on-disk map from a fused group's signature to its compiled kernel (nn_ops/network/kernel_cache.py)."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.network import executable, kernel_cache

onnx = pytest.importorskip("onnx")

from loopweave.nn_ops.testing.model_zoo import small_cnn  # noqa: E402


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path))
    return tmp_path


def _run(exe):
    x = np.random.default_rng(0).standard_normal(exe.inputs[0][1]).astype("float32")
    return exe.run({exe.inputs[0][0]: x})[0]


def _reference(model):
    """The model's output from onnxruntime, on ``_run``'s input."""
    ort = pytest.importorskip("onnxruntime")
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {model.graph.input[0].name: x})[0]


def _count_builds(monkeypatch):
    calls = []
    real = executable._group_schedule

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(executable, "_group_schedule", counting)
    return calls


def test_second_compile_builds_nothing_and_runs_the_same(fresh_cache, monkeypatch):
    model = small_cnn()
    builds = _count_builds(monkeypatch)
    first = lw.compile(lw.from_onnx(model), progress=False)
    assert len(builds) == len(first.kernels) > 0
    assert len(list(fresh_cache.glob("*.kernel"))) == len(first.kernels)
    builds.clear()
    second = lw.compile(lw.from_onnx(model), progress=False)
    assert builds == []
    assert sorted(second.kernels) == sorted(first.kernels)
    np.testing.assert_array_equal(_run(first), _run(second))


def test_a_changed_compiler_or_a_lost_object_rebuilds(fresh_cache, monkeypatch):
    model = small_cnn()
    lw.compile(lw.from_onnx(model), progress=False)
    builds = _count_builds(monkeypatch)
    monkeypatch.setattr(kernel_cache, "_fingerprint", "another version of the compiler")
    lw.compile(lw.from_onnx(model), progress=False)
    assert len(builds) > 0
    builds.clear()
    for obj in fresh_cache.glob("*.o"):
        obj.unlink()
    monkeypatch.setattr(kernel_cache, "_fingerprint", None)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    assert len(builds) == len(exe.kernels)
    np.testing.assert_allclose(_run(exe), _reference(model), rtol=1e-4, atol=1e-4)


def test_fingerprint_covers_the_compiler_source(tmp_path):
    """source_hash sees every edit under the folders it is given (and the top-level files)."""
    from loopweave.backends.llvm.jit import source_hash
    (tmp_path / "dsl" / "deep").mkdir(parents=True)
    (tmp_path / "dsl" / "deep" / "a.py").write_text("x = 1\n")
    (tmp_path / "top.py").write_text("y = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("z = 1\n")
    first = source_hash(tmp_path, ["dsl"], top_level=True)
    (tmp_path / "tests" / "t.py").write_text("z = 2\n")          # outside the folders: no change
    assert source_hash(tmp_path, ["dsl"], top_level=True) == first
    (tmp_path / "dsl" / "deep" / "a.py").write_text("x = 2\n")
    second = source_hash(tmp_path, ["dsl"], top_level=True)
    (tmp_path / "top.py").write_text("y = 2\n")
    assert len({first, second, source_hash(tmp_path, ["dsl"], top_level=True)}) == 3


def test_fingerprint_hashes_the_whole_compiler(monkeypatch):
    """The kernel cache's fingerprint is taken over the package's compiler folders (a wrong root
    would hash nothing and let a changed compiler reuse stale kernels)."""
    from pathlib import Path
    from loopweave.backends.llvm import jit
    seen = []
    monkeypatch.setattr(kernel_cache, "_fingerprint", None)
    monkeypatch.setattr(jit, "source_hash", lambda root, folders, top_level=False: seen.append((root, folders)) or "h")
    assert kernel_cache.source_fingerprint() == "h"
    (root, folders), = seen
    assert Path(root) == Path(lw.__file__).resolve().parent
    assert {"dsl", "lowering", "backends", "nn_ops"} <= {f for f in folders if (Path(root) / f).is_dir()}


def test_a_schedule_registered_from_outside_turns_the_cache_off(fresh_cache, monkeypatch):
    from loopweave.nn_ops.ops import registry
    assert kernel_cache.applies()
    model = small_cnn()
    lw.compile(lw.from_onnx(model), progress=False)
    key = ("pool2d", "llvm")
    monkeypatch.setitem(registry._SCHEDULES, key, lambda s, op, target: None)   # a notebook's own schedule
    assert not kernel_cache.applies()
    builds = _count_builds(monkeypatch)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    assert len(builds) == len(exe.kernels)


def test_a_second_cuda_compile_lowers_nothing(fresh_cache, monkeypatch):
    """For the GPU the cache keeps each group's lowered function: compiling the same network again
    (a new process, in real use) schedules and lowers no kernel, and gives the same device code.
    Building for cuda needs no GPU."""
    model = small_cnn()
    first = lw.compile(lw.from_onnx(model), target="cuda", progress=False)
    assert len(list(fresh_cache.glob("*.lowered.json"))) == len(first.modules) > 0
    builds = _count_builds(monkeypatch)
    second = lw.compile(lw.from_onnx(model), target="cuda", progress=False)
    assert builds == []
    assert sorted(second.modules) == sorted(first.modules)
    assert second.sources("cuda") == first.sources("cuda")
    # a damaged entry is a miss: that group is lowered again, the rest still come from the cache
    victim = sorted(fresh_cache.glob("*.lowered.json"))[0]
    victim.write_bytes(victim.read_bytes()[:-7] + b"damaged")
    with pytest.warns(UserWarning):
        third = lw.compile(lw.from_onnx(model), target="cuda", progress=False)
    assert len(builds) == 1 and sorted(third.modules) == sorted(first.modules)


def test_a_second_polymorphic_compile_lowers_nothing_and_runs_the_same(fresh_cache, monkeypatch):
    """A shape-polymorphic kernel is remembered by its structural key: compiling the same network
    again (a new process, in real use) builds no kernel; a damaged entry is a miss for that kernel
    only."""
    from loopweave.backends import build as build_module
    from loopweave.nn_ops.testing.model_zoo import symbolic_sizes
    model = symbolic_sizes(small_cnn(classes=16))
    first = lw.compile(lw.from_onnx(model), polymorphic=True)
    first.build_variants()       # (a conv's variants are built by the first run that picks them)
    entries = sorted(fresh_cache.glob("*.poly"))
    assert len(entries) == len(first.kernels) > 0
    built = []
    real = build_module.build_many

    def counting(jobs, *args, **kwargs):
        built.extend(name for _, _, name in jobs)
        return real(jobs, *args, **kwargs)
    monkeypatch.setattr(build_module, "build_many", counting)
    second = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert built == []
    assert {k: m.symbol for k, m in second.kernels.items()} == {k: m.symbol for k, m in first.kernels.items()}
    x = np.random.default_rng(0).standard_normal((2, 3, 13, 19)).astype("float32")
    np.testing.assert_array_equal(first.run({"input": x})[0], second.run({"input": x})[0])
    # a cached kernel has no source to show, and says how to get one
    with pytest.raises(lw.ArgumentError, match=r"was loaded compiled .* LOOPWEAVE_CACHE_DIR set to an empty folder"):
        next(iter(second.kernels.values())).get_source("lowered")
    entries[0].write_bytes(entries[0].read_bytes()[:-5] + b"oops!")
    with pytest.warns(UserWarning):
        third = lw.compile(lw.from_onnx(model), polymorphic=True)
        third.build_variants()
    assert len(built) == 1
    np.testing.assert_array_equal(first.run({"input": x})[0], third.run({"input": x})[0])
