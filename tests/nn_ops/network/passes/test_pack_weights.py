"""pack_weights: the constants the kernels read in one aligned blob, the graph's initializers views of it."""
import numpy as np
import pytest

from loopweave.backends.aligned_memory import ALIGN
from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import pack_weights


def test_used_constants_are_packed_aligned_in_name_order_and_become_read_only_views():
    g = Graph()
    b = np.arange(5, dtype=np.int64)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    g.add_initializer("b", b)
    g.add_initializer("a", a)
    g.add_initializer("unused", np.ones(3, np.float32))
    g.add_value("x", (2, 3))
    blob, table = pack_weights(g, {"a", "b", "x"})
    assert table == {"a": (0, [2, 3], "float32"), "b": (ALIGN, [5], "int64")}
    assert blob.ctypes.data % ALIGN == 0 and blob.nbytes == 2 * ALIGN
    np.testing.assert_array_equal(blob[ALIGN:ALIGN + b.nbytes].view(np.int64), b)
    np.testing.assert_array_equal(g.initializers["a"], a)
    assert np.shares_memory(g.initializers["a"], blob) and not np.shares_memory(g.initializers["unused"], blob)
    with pytest.raises(ValueError):
        g.initializers["a"][0, 0] = 1.0
