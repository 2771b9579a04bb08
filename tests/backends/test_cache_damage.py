"""A damaged or unusable object cache never reaches LLVM (backends/disk_cache.py, backends/llvm/jit.py).

Every build runs in a child process: a damaged object handed to LLVM aborts the
interpreter, which a test in this process could not report.
"""
import os
import subprocess
import sys
import textwrap

import pytest

BUILD = textwrap.dedent("""
    import warnings, numpy as np, loopweave as lw
    from loopweave.errors import CacheWarning
    warnings.simplefilter("always", CacheWarning)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CacheWarning)
        n = 64
        A = lw.placeholder((n,), name="A")
        B = lw.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
        f = lw.build(lw.create_schedule(B), [A, B], target="llvm")
        a = np.arange(n, dtype="float32"); b = np.empty(n, "float32")
        f(a, b)
        assert np.array_equal(b, a * 2 + 1), b
    for w in caught:
        if issubclass(w.category, CacheWarning):
            print("WARNING:", w.message)
    print("OK")
""")


def _child(cache_dir, script=BUILD):
    env = dict(os.environ, LOOPWEAVE_CACHE_DIR=str(cache_dir))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"child ended with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _flip(path):
    data = bytearray(path.read_bytes())
    for k in range(40, len(data), max(1, len(data) // 7)):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


def _strip_header(path):
    """An entry as an older loopweave wrote it (the raw object, no checksum)."""
    path.write_bytes(path.read_bytes()[36:])


@pytest.mark.parametrize("damage", [_truncate, _flip, _strip_header])
def test_a_damaged_object_is_deleted_rebuilt_and_reported_once(tmp_path, damage):
    out = _child(tmp_path)
    assert "WARNING" not in out and out.strip().endswith("OK")
    objects = sorted(tmp_path.glob("*.o"))
    assert objects, "the first build cached nothing"
    for path in objects:
        damage(path)
    out = _child(tmp_path)
    warned = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warned) == len(objects), out
    for path in objects:
        assert sum(str(path) in line for line in warned) == 1, out
    assert all("damaged" in line for line in warned)
    # rebuilt and stored again: the next process is quiet
    out = _child(tmp_path)
    assert "WARNING" not in out and out.strip().endswith("OK")


def test_an_unusable_cache_folder_builds_in_memory_with_one_warning(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    out = _child(blocker / "cache")
    warned = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1 and "cannot be used" in warned[0] and str(blocker / "cache") in warned[0], out
    assert out.strip().endswith("OK")


NETWORK = textwrap.dedent("""
    import warnings, numpy as np, loopweave as lw
    from loopweave.errors import CacheWarning
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CacheWarning)
        exe = lw.compile(lw.from_onnx(small_cnn()), progress=False)
        x = np.random.default_rng(0).standard_normal(exe.inputs[0][1]).astype("float32")
        y = exe.run({exe.inputs[0][0]: x})[0]
    for w in caught:
        if issubclass(w.category, CacheWarning):
            print("WARNING:", w.message)
    print("SUM", float(np.abs(y).sum()))
""")


@pytest.mark.parametrize("damage", [_truncate, _flip])
def test_damaged_network_kernel_entries_and_objects_rebuild(tmp_path, damage):
    pytest.importorskip("onnx")
    first = _child(tmp_path, NETWORK)
    entries = sorted(tmp_path.glob("*.kernel")) + sorted(tmp_path.glob("*.o"))
    assert any(p.suffix == ".kernel" for p in entries)
    for path in entries:
        damage(path)
    second = _child(tmp_path, NETWORK)
    warned = [line for line in second.splitlines() if line.startswith("WARNING")]
    assert warned and all("damaged" in line for line in warned), second
    assert first.splitlines()[-1] == second.splitlines()[-1]      # the same answer after the rebuild
