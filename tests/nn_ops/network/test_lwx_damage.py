"""Damaged ``.lwx`` files give a clean loopweave error naming the member, never a signal
(nn_ops/network/archive.py, Executable.save / load_static, DynamicExecutable.save / load_dynamic).

Each damaged copy is rewritten as a valid zip (fresh CRCs), so the sha256 recorded at save
is the only guard; the loads run in one child process that reports one line per case, so a
crash names the case it died on.
"""
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import small_cnn  # noqa: E402

CHILD = textwrap.dedent("""
    import sys, numpy as np, loopweave as lw
    for path in sys.argv[1:]:
        print("CASE", path, flush=True)
        try:
            exe = lw.load(path)
            x = np.zeros(exe.inputs[0][1] if not hasattr(exe, "graph") or exe.inputs[0][1][0] != "N"
                         else (3,) + tuple(exe.inputs[0][1][1:]), np.float32)
            exe.run({exe.inputs[0][0]: x})
            print("LOADED", path, flush=True)
        except lw.LoopweaveError as exc:
            print("ERROR", type(exc).__name__, getattr(exc, "member", ""), "|", str(exc).replace("\\n", " "), flush=True)
    print("DONE")
""")


def _load_in_child(paths, tmp_path):
    env = dict(os.environ, LOOPWEAVE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", CHILD, *map(str, paths)], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = proc.stdout.splitlines()
    last = [line for line in lines if line.startswith("CASE")][-1:] or ["(none)"]
    assert proc.returncode == 0 and lines and lines[-1] == "DONE", \
        f"child ended with {proc.returncode} during {last[0]}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    results = {}
    for case, outcome in zip(lines[0:-1:2], lines[1:-1:2]):
        results[case.split(" ", 1)[1]] = outcome
    return results


def _rewrite(src, dst, replace=None, drop=(), fix_meta_digest=False):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        meta_text = None
        for item in zin.namelist():
            if item in drop or (fix_meta_digest and item == "meta.sha256"):
                continue
            data = zin.read(item)
            if replace and item in replace:
                data = replace[item](data)
            if item == "meta.json":
                meta_text = data
            zout.writestr(item, data)
        if fix_meta_digest:
            zout.writestr("meta.sha256", hashlib.sha256(meta_text).hexdigest())


def _named(member):
    """The members a DamagedFileError may name for damage to ``member``: itself, or, for damage to
    meta.json's digest that still reads as a digest, meta.json (which of the two is damaged, nothing
    can tell)."""
    return (member, "meta.json") if member == "meta.sha256" else (member,)


def _truncate(data):
    return data[: len(data) // 2]


def _flip(data):
    data = bytearray(data)
    data[len(data) // 2] ^= 0x5A
    return bytes(data)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lwx")
    exe = lw.compile(lw.from_onnx(small_cnn(size=8)), progress=False)
    path = folder / "good.lwx"
    exe.save(path)
    return folder, path


def test_every_damaged_member_is_named_and_never_crashes(saved, tmp_path):
    folder, good = saved
    with zipfile.ZipFile(good) as z:
        members = z.namelist()
    assert {"meta.json", "meta.sha256", "runner.o"} <= set(members)
    assert any(m.startswith("kernels/") for m in members) and any(m.startswith("weights/") for m in members)
    cases = {}
    for k, member in enumerate(members):
        for damage in (_truncate, _flip):
            path = tmp_path / f"{k}_{damage.__name__}.lwx"
            _rewrite(good, path, replace={member: damage})
            cases[str(path)] = member
        path = tmp_path / f"{k}_missing.lwx"
        _rewrite(good, path, drop={member})
        cases[str(path)] = member
    # damage to the zip itself: cut short, bytes flipped in its middle
    raw = good.read_bytes()
    for name, data in [("cut", raw[: len(raw) // 2]), ("cut_end", raw[:-30]), ("flipped", _flip(raw))]:
        (tmp_path / f"zip_{name}.lwx").write_bytes(data)
        cases[str(tmp_path / f"zip_{name}.lwx")] = None
    results = _load_in_child([good, *cases], tmp_path)
    assert results[str(good)].startswith("LOADED")
    for path, member in cases.items():
        outcome = results[path]
        if member is None:      # the zip itself is damaged: no member to name, but a clean error
            assert outcome.startswith(("ERROR DamagedFileError", "ERROR ArgumentError")), (path, outcome)
        else:
            assert outcome.startswith(tuple(f"ERROR DamagedFileError {m} |" for m in _named(member))), \
                (path, member, outcome)
            assert repr(member) in outcome, (path, member, outcome)


BAD_META = {
    "not_utf8": lambda meta: b"\xff\xfe\x00{",
    "not_json": lambda meta: b"{this is not json",
    "a_list": lambda meta: b"[1, 2, 3]",
    "no_runner": lambda meta: {k: v for k, v in meta.items() if k != "runner"},
    "arena_a_string": lambda meta: dict(meta, arena_size="big"),
    "arena_absurd": lambda meta: dict(meta, arena_size=10 ** 18),
    "weights_bad_file": lambda meta: dict(meta, weights=[{"name": "w", "file": 3, "offset": 0}]),
    "weights_past_end": lambda meta: dict(meta, weights=[dict(meta["weights"][0], offset=meta["weights_size"])]),
    "calls_a_string": lambda meta: dict(meta, calls="x"),
    "inputs_bad": lambda meta: dict(meta, inputs=[[1, 2]]),
    "negative_shape": lambda meta: dict(meta, outputs=[[meta["outputs"][0][0], [-1], "float32"]]),
    "bad_dtype": lambda meta: dict(meta, inputs=[[meta["inputs"][0][0], meta["inputs"][0][1], "float7"]]),
    "no_checksums": lambda meta: {k: v for k, v in meta.items() if k != "checksums"},
    "unknown_kernel": lambda meta: dict(meta, kernels=meta["kernels"] + ["lw_nothing"]),
    "call_to_missing_kernel": lambda meta: dict(meta, kernels=meta["kernels"][1:]),
}


def test_a_bad_meta_json_is_a_clean_error(saved, tmp_path):
    _, good = saved
    with zipfile.ZipFile(good) as z:
        meta = json.loads(z.read("meta.json"))
    cases = {}
    for name, change in BAD_META.items():
        new = change(meta)
        data = new if isinstance(new, bytes) else json.dumps(new).encode()
        path = tmp_path / f"meta_{name}.lwx"
        _rewrite(good, path, replace={"meta.json": lambda _old, data=data: data}, fix_meta_digest=True)
        cases[str(path)] = name
    results = _load_in_child(list(cases), tmp_path)
    for path, name in cases.items():
        assert results[path].startswith("ERROR DamagedFileError"), (name, results[path])


def test_old_versions_are_refused_with_a_clear_message(saved, tmp_path):
    _, good = saved
    old = tmp_path / "v1.lwx"

    def as_v1(data):
        meta = json.loads(data)
        meta["version"] = 1
        del meta["checksums"]
        return json.dumps(meta).encode()
    _rewrite(good, old, replace={"meta.json": as_v1}, drop={"meta.sha256"})
    with pytest.raises(lw.ArgumentError, match="older loopweave.*save it again"):
        lw.load(old)


def test_damaged_dynamic_executable_members(tmp_path):
    model = small_cnn(size=8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    exe = lw.compile(lw.from_onnx(model), progress=False, polymorphic=False)
    exe.run({"input": np.zeros((3, 3, 8, 8), np.float32)})
    good = tmp_path / "dyn.lwx"
    exe.save(good)
    with zipfile.ZipFile(good) as z:
        members = z.namelist()
    assert "model.onnx" in members and "specializations/0.lwx" in members
    cases = {}
    for k, member in enumerate(members):
        for damage in (_truncate, _flip):
            path = tmp_path / f"dyn_{k}_{damage.__name__}.lwx"
            _rewrite(good, path, replace={member: damage})
            cases[str(path)] = member
        path = tmp_path / f"dyn_{k}_missing.lwx"
        _rewrite(good, path, drop={member})
        cases[str(path)] = member
    results = _load_in_child([good, *cases], tmp_path)
    assert results[str(good)].startswith("LOADED"), results[str(good)]
    for path, member in cases.items():
        assert results[path].startswith(tuple(f"ERROR DamagedFileError {m} |" for m in _named(member))), \
            (path, member, results[path])
        assert repr(member) in results[path], (member, results[path])


@pytest.mark.parametrize("what", [None, 3, b"PK\x03\x04", "no/such/file.lwx"])
def test_load_of_something_that_is_not_a_file_is_an_argument_error(what):
    with pytest.raises(lw.ArgumentError):
        lw.load(what)
