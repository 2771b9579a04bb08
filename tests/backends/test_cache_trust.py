"""The compiled-code cache holds code later compiles load: it is created 0700, a folder that another
user owns or that others can write is not used (one CacheWarning, the build stays in memory), and a
cached GPU lowering is read back as data, never unpickled."""
import itertools
import os
import pickle
import stat
import warnings

import numpy as np
import pytest

import loopweave as lw
from loopweave.backends import disk_cache
from loopweave.errors import CacheWarning


_fresh = itertools.count(1)


def _build_and_run():
    """A kernel this process has not built before, built and checked; the CacheWarnings it raised."""
    k = float(next(_fresh))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CacheWarning)
        A = lw.placeholder((37,), name="A")
        B = lw.compute((37,), lambda i: A[i] * 3.0 - k, name="B")
        f = lw.build(lw.create_schedule(B), [A, B])
        a = np.arange(37, dtype="float32")
        b = np.empty(37, "float32")
        f(a, b)
    np.testing.assert_array_equal(b, a * 3 - k)
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def test_a_new_cache_folder_is_private(tmp_path, monkeypatch):
    folder = tmp_path / "deep" / "cache"
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(folder))
    assert _build_and_run() == []
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert any(folder.iterdir())          # and it is used


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch, mode):
    folder = tmp_path / f"shared{mode:o}"
    folder.mkdir()
    folder.chmod(mode)
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(folder))
    warned = _build_and_run()
    assert len(warned) == 1, warned
    assert str(folder) in warned[0] and "group or other users can write it" in warned[0]
    assert list(folder.iterdir()) == []          # nothing read or written there
    assert _build_and_run() == []                 # reported once per folder


def test_a_folder_of_another_user_is_not_used(tmp_path, monkeypatch):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(folder))
    monkeypatch.setattr(os, "getuid", lambda: folder.stat().st_uid + 1)
    with pytest.warns(CacheWarning, match="belongs to another user"):
        assert disk_cache.writable_cache_dir() is None


class _Payload:
    """Unpickling this runs code: it leaves a mark."""
    mark = ""

    def __reduce__(self):
        return (open, (self.mark, "w"))


def test_a_cached_gpu_lowering_is_data_not_a_pickle(tmp_path, monkeypatch):
    """A pickle placed where the GPU kernel cache keeps lowered functions is never loaded; the entry
    the cache writes is JSON and gives the same CUDA C back.  Needs no GPU."""
    pytest.importorskip("onnx")
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    cache = tmp_path / "cache"
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(cache))
    first = lw.compile(lw.from_onnx(small_cnn()), target="cuda", progress=False)
    entries = [p for p in cache.iterdir() if ".lowered" in p.name]
    assert entries
    _Payload.mark = str(tmp_path / "unpickled")
    evil = pickle.dumps(_Payload())
    for entry in entries:
        key = entry.name.split(".")[0]
        for suffix in (".lowered", ".lowered.json"):
            disk_cache.write_checksummed(cache / (key + suffix), evil)
    second = lw.compile(lw.from_onnx(small_cnn()), target="cuda", progress=False)
    assert not os.path.exists(_Payload.mark)
    assert second.sources("cuda") == first.sources("cuda")
    rewritten = sorted(cache.glob("*.lowered.json"))      # each group lowered again, stored as JSON
    assert len(rewritten) == len(entries) and all(disk_cache.read_verified(p).startswith(b"{") for p in rewritten)
    # a third compile builds its modules from those entries: the same functions, host programs included
    third = lw.compile(lw.from_onnx(small_cnn()), target="cuda", progress=False)
    assert sorted(third.modules) == sorted(first.modules)
    for symbol, module in first.modules.items():
        assert third.modules[symbol].lowered_function.structural_key() == module.lowered_function.structural_key()
