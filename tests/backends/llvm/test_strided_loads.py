"""Vector loads with a constant stride 2-4 are one masked wide load + a shuffle, not a gather."""
import numpy as np
import pytest

import loopweave as lw


@pytest.mark.parametrize("stride", [2, 3, 4, 5])
def test_strided_vector_load(stride):
    n = 16 * 8
    A = lw.placeholder((n * stride - (stride - 1),), name="A")     # ends exactly at the last element read
    B = lw.compute((n,), lambda i: A[i * stride] * 2.0, name="B")
    s = lw.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    f = lw.build(s, [A, B])
    a = np.random.default_rng(stride).random(n * stride - (stride - 1)).astype("float32")
    b = np.empty(n, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a[::stride] * 2)
    ll = f.get_source("ll")
    assert ("masked.gather" in ll) == (stride > 4)
