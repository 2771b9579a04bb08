"""op_table.infer_output over symbolic sizes: sympy sizes in, sympy sizes out (the encoder's ops)."""
import pytest

from loopweave.errors import ExprError
from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.op_table import infer_output, output_shape

B, T = S.symbol("batch"), S.symbol("seq")


@pytest.mark.parametrize("op,shapes,attrs,want", [
    ("dense_kn", [(B * T, 32), (32, 64), (64,)], {}, (B * T, 64)),
    ("dense", [(B * T, 32), (48, 32)], {}, (B * T, 48)),
    ("matmul", [(2 * B, T, 16), (2 * B, 16, T)], {}, (2 * B, T, T)),
    ("add", [(B, T, 32), (32,)], {}, (B, T, 32)),
    ("mul", [(B * T, 32), (B * T, 32)], {}, (B * T, 32)),
    ("div", [(B, 2, T, T), (1, 1, 1, T)], {}, (B, 2, T, T)),
    ("softmax", [(B, 2, T, T)], {"axis": -1}, (B, 2, T, T)),
    ("layer_norm", [(B, T, 32), (32,), (32,)], {"axis": -1, "epsilon": 1e-5}, (B, T, 32)),
    ("gelu", [(B * T, 64)], {}, (B * T, 64)),
    ("transpose", [(B, T, 2, 16)], {"perm": (0, 2, 1, 3)}, (B, 2, T, 16)),
])
def test_symbolic_sizes_give_symbolic_shapes(op, shapes, attrs, want):
    t = infer_output(op, shapes, ["float32"] * len(shapes), attrs)
    got = output_shape(t)
    assert len(got) == len(want) and all(S.equal(g, w) is True for g, w in zip(got, want))
    assert t.dtype == "float32"


def test_static_sizes_stay_ints():
    got = output_shape(infer_output("add", [(4, 32), (32,)], ["float32"] * 2, {}))
    assert got == (4, 32) and all(type(d) is int for d in got)


def test_sizes_that_may_differ_do_not_broadcast():
    with pytest.raises(ExprError, match="do not broadcast along equal sizes"):
        infer_output("add", [(B, T, 32), (T, 32, 1)], ["float32"] * 2, {})
    with pytest.raises(ExprError, match="do not broadcast"):
        infer_output("add", [(B, 32), (B, 31)], ["float32"] * 2, {})
