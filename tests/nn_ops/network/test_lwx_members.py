"""A .lwx member is read only if it is stored uncompressed and declares a size the file and the
memory limit allow: a deflated member (which could inflate to gigabytes before its checksum is
checked) is a DamagedFileError naming it, refused before it is inflated."""
import tracemalloc
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.errors import DamagedFileError


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], np.arange(4, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("lwx") / "good.lwx"
    lw.compile(lw.from_onnx(model), progress=False).save(path)
    with zipfile.ZipFile(path) as z:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in z.infolist())
    return path


def _rewrite(src, dst, member, data=None, compression=zipfile.ZIP_DEFLATED):
    """A copy of ``src`` whose ``member`` is written with ``compression`` (and ``data``, if given)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            body = zin.read(name)
            if name == member:
                zout.writestr(name, body if data is None else data, compress_type=compression)
            else:
                zout.writestr(name, body)


def _members(path):
    with zipfile.ZipFile(path) as z:
        return z.namelist()


def test_every_deflated_member_is_refused_by_name(saved, tmp_path):
    for k, member in enumerate(_members(saved)):
        path = tmp_path / f"deflated{k}.lwx"
        _rewrite(saved, path, member)      # the same bytes, checksums intact: only the compression differs
        with pytest.raises(DamagedFileError, match="is compressed") as info:
            lw.load(path)
        assert info.value.member == member, (member, str(info.value))


def test_an_inflating_member_is_refused_before_it_is_inflated(saved, tmp_path):
    member = next(m for m in _members(saved) if m.startswith("weights/"))
    path = tmp_path / "bomb.lwx"
    _rewrite(saved, path, member, data=bytes(64 << 20))        # 64 MiB of zeros: about 64 KiB deflated
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(DamagedFileError) as info:
            lw.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.member == member
    assert peak < 16 << 20, f"{peak} bytes allocated while refusing it"


def test_a_stored_member_larger_than_the_limit_is_refused(saved, tmp_path):
    member = next(m for m in _members(saved) if m.startswith("weights/"))
    path = tmp_path / "big.lwx"
    _rewrite(saved, path, member, data=bytes(1 << 20), compression=zipfile.ZIP_STORED)
    with lw.memory_limit(1 << 16), pytest.raises(DamagedFileError, match="declares 1048576 bytes") as info:
        lw.load(path)
    assert info.value.member == member
