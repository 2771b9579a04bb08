"""The exported C API's documentation (the generated header, the README) says what lw_model_run cannot
check: it takes bare pointers, so a buffer's size is the caller's to get right."""
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.nn_ops.network import export

README = Path(lw.__file__).resolve().parent / "README.md"


def test_header_and_readme_say_buffer_sizes_are_not_checked():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], np.arange(4, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], initializer=[w])
    exe = lw.compile(lw.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])),
                     progress=False)
    header = " ".join(export.header_text(exe, "lw_", "m.h", "m.so").replace("*", " ").split())
    assert "cannot check a buffer's size" in header
    assert "lw_model_run takes bare pointers" in header
    if README.exists():      # (an installed wheel has no README)
        text = " ".join(README.read_text().split())
        assert "`lw_model_run` takes bare pointers and cannot check a buffer's size" in text
        assert "Every function checks its arguments" not in text
