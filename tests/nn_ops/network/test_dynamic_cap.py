"""A DynamicExecutable keeps at most max_specializations compiled bindings (least recently used out):
clients sending ever new shapes cannot make a server hold one compiled network per shape."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.errors import ArgumentError
from loopweave.nn_ops.network import dynamic_executable


@pytest.fixture
def exe():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return lw.compile(lw.from_onnx(model), progress=False, polymorphic=False)


def _run(exe, n):
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4) - 5
    np.testing.assert_array_equal(exe.run({"x": x})[0], np.maximum(x, 0))


def _batches(exe):
    return [dict(e for e in key if len(e) == 2)["x"][0] for key in exe.specializations]


def test_the_default_cap_is_documented_and_applied(exe):
    assert exe.max_specializations == dynamic_executable.MAX_SPECIALIZATIONS == 16
    assert "MAX_SPECIALIZATIONS" in dynamic_executable.__doc__
    for n in range(1, 21):
        _run(exe, n)
    assert _batches(exe) == list(range(5, 21))


def test_least_recently_used_goes_first(exe, monkeypatch):
    exe.max_specializations = 3
    compiled = []
    real = dynamic_executable.compile_graph
    monkeypatch.setattr(dynamic_executable, "compile_graph", lambda *a, **k: compiled.append(1) or real(*a, **k))
    for n in (1, 2, 3):
        _run(exe, n)
    _run(exe, 1)                    # used again: now the newest
    _run(exe, 4)                    # evicts 2, the least recently used
    assert _batches(exe) == [3, 1, 4] and len(compiled) == 4
    _run(exe, 2)                    # compiled again
    assert _batches(exe) == [1, 4, 2] and len(compiled) == 5


def test_the_cap_must_be_a_positive_count():
    with pytest.raises(ArgumentError, match="max_specializations must be a whole number >= 1"):
        dynamic_executable.DynamicExecutable(graph=None, max_specializations=0)
