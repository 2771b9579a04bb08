"""The generated C of an exported network compiles against either strerror_r: GNU's (returns the
text; glibc with _GNU_SOURCE) and POSIX's (returns a status; musl, the BSDs).  Passing POSIX's int
to a "%s" is what a musl build of the old code did."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.nn_ops.network import export

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")

# POSIX's strerror_r in place of glibc's GNU one, for every use after the libc's own headers
POSIX_STRERROR = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
static int posix_strerror_r(int code, char *buf, size_t cap) { snprintf(buf, cap, "error %d", code); return 0; }
#define strerror_r posix_strerror_r
"""


@pytest.mark.skipif(CC is None, reason="no C compiler (cc)")
@pytest.mark.parametrize("libc", ["gnu", "posix"])
def test_side_params_source_compiles_with_either_strerror_r(tmp_path, libc):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], np.arange(4, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = lw.compile(lw.from_onnx(model), progress=False)
    (tmp_path / "m.h").write_text(export.header_text(exe, "lw_", "m.h", "m.so", "side"))
    (tmp_path / "api.c").write_text(export.source_text(exe, "lw_", "m.h", "side"))
    (tmp_path / "shim.h").write_text(POSIX_STRERROR)
    cmd = [CC, "-fsyntax-only", "-Wall", "-Werror", "-std=gnu11", str(tmp_path / "api.c")]
    if libc == "posix":
        cmd[1:1] = ["-include", str(tmp_path / "shim.h")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
