"""What loopweave writes for the user (.lwx, exported .so / .h / .params) goes through a temporary file
of an unpredictable name beside the target and os.replace: a link planted at a predictable name
('model.so.partial') is never followed, a failed write leaves the old file and no debris, and the
files get the usual permissions."""
import os
import shutil
import stat

import numpy as np
import pytest
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.backends import output_file
from loopweave.errors import BuildError

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


@pytest.fixture(scope="module")
def exe():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], np.arange(4, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return lw.compile(lw.from_onnx(model), progress=False)


def _plant(folder, names):
    """A victim file, and a symbolic link to it at each of ``names``."""
    victim = folder / "victim.txt"
    victim.write_text("precious")
    for name in names:
        (folder / name).symlink_to(victim)
    return victim


@pytest.mark.skipif(CC is None, reason="no C compiler (cc)")
def test_export_never_follows_a_planted_partial_link(exe, tmp_path):
    victim = _plant(tmp_path, ["model.so.partial", "model.params.partial", "model.h.partial"])
    lib = exe.export_library(tmp_path / "model.so", params="side")
    assert victim.read_text() == "precious"
    assert lib.is_file() and not lib.is_symlink()
    for name in ("model.so", "model.h", "model.params"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode & 0o666 == 0o666 & ~output_file._umask(), (name, oct(mode))   # not mkstemp's 0600
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert leftovers == []


def test_save_never_follows_a_planted_partial_link(exe, tmp_path):
    victim = _plant(tmp_path, ["model.lwx.partial"])
    exe.save(tmp_path / "model.lwx")
    assert victim.read_text() == "precious"
    again = lw.load(tmp_path / "model.lwx")
    np.testing.assert_array_equal(again.run({"x": np.ones(4, np.float32)})[0], np.arange(4) + 1)


@pytest.mark.skipif(CC is None, reason="no C compiler (cc)")
def test_a_failed_export_leaves_the_old_library_and_no_debris(exe, tmp_path, monkeypatch):
    from loopweave.nn_ops.network import export
    (tmp_path / "model.so").write_bytes(b"the old library")

    def broken_link(output, *args, **kwargs):
        output.write_bytes(b"half a library")
        raise BuildError("the linker failed")
    monkeypatch.setattr(export, "link_shared", broken_link)
    with pytest.raises(BuildError, match="the linker failed"):
        exe.export_library(tmp_path / "model.so")
    assert (tmp_path / "model.so").read_bytes() == b"the old library"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.so"]


def test_a_failed_save_leaves_the_old_file(exe, tmp_path, monkeypatch):
    from loopweave.nn_ops.network import archive
    (tmp_path / "model.lwx").write_bytes(b"the old executable")

    def broken_finish(self, meta):
        raise OSError("disk full")
    monkeypatch.setattr(archive.ArchiveWriter, "finish", broken_finish)
    with pytest.raises(OSError, match="disk full"):
        exe.save(tmp_path / "model.lwx")
    assert (tmp_path / "model.lwx").read_bytes() == b"the old executable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.lwx"]
