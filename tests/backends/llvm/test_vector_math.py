"""The inline float32 exp/erf/tanh/sigmoid (backends/llvm/vector_math.py) against float64 numpy.

Vector and scalar code both use them; the inputs cover the polynomial ranges, the clamps,
overflow to inf, underflow to denormals and zero, and inf/-inf/NaN.
"""
import math

import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl import intrinsics

SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30, 1e-6, 88.7, 88.72, -87.5, -103.0, -110.0, 4.0, -4.0,
           7.9, -7.9, 20.0]
X = np.concatenate([np.linspace(-120, 100, 4001), np.linspace(-5, 5, 4001), SPECIAL]).astype(np.float32)

REFERENCES = {
    "exp": np.exp,
    "erf": np.vectorize(math.erf),
    "tanh": np.tanh,
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
}


def _run(name, x, lanes):
    n = x.size
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: getattr(intrinsics, name)(A[i]), name="B")
    s = lw.create_schedule(B)
    if lanes > 1:
        _, inner = s[B].split(B.op.axis[0], factor=lanes)
        s[B].vectorize(inner)
    f = lw.build(s, [A, B])
    y = np.empty_like(x)
    f(x, y)
    return y


@pytest.mark.parametrize("lanes", [1, 16])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_float64_reference(name, lanes):
    x = X[: X.size // lanes * lanes]
    got = _run(name, x, lanes)
    with np.errstate(over="ignore", under="ignore"):
        ref = REFERENCES[name](x.astype(np.float64)).astype(np.float32)   # rounded as float32 would be
    # a few ulp in the normal range; denormal results within 1e-44 absolute (sigmoid of large negative
    # inputs is 1 / (1 + inf) = 0 where float64 still has a denormal, as with libm's expf)
    atol = 1.2e-38 if name == "sigmoid" else 1e-44
    close = np.isclose(got, ref, rtol=4e-7, atol=atol, equal_nan=True)
    assert close.all(), [(float(a), float(b), float(c)) for a, b, c in zip(x[~close], got[~close], ref[~close])][:5]


def test_vector_code_has_no_libm_calls():
    A = lw.placeholder((64,), name="A")
    B = lw.compute((64,), lambda i: intrinsics.exp(A[i]) + intrinsics.erf(A[i]) + intrinsics.tanh(A[i]), name="B")
    s = lw.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    ll = lw.build(s, [A, B]).get_source("ll-opt")
    for fn in ("@expf", "@erff", "@tanhf", "@llvm.exp."):
        assert fn not in ll
