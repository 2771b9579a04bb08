"""``dot4_u8s8``: the int32 sum of four byte products, uint8 by int8, on every CPU target."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.intrinsics import dot4_u8s8
from loopweave.errors import DTypeError
from loopweave.target import host_target

# instructions follow the host CPU (VNNI or not): .ci/run runs these again as an AVX2 host
pytestmark = pytest.mark.vector_width

N = 64


def _reference(a, b):
    ab = a.view(np.uint8).reshape(*a.shape, 4).astype(np.int64)
    bb = b.view(np.int8).reshape(*b.shape, 4).astype(np.int64)
    return (ab * bb).sum(-1)


def _words(rng, n):
    return rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)


def _targets():
    targets = ["llvm", "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v2"]
    return targets if host_target().arch == "x86_64" else ["llvm"]


@pytest.mark.parametrize("target", _targets())
@pytest.mark.parametrize("lanes", [None, 4, 8, 16, 32, 48])
@pytest.mark.parametrize("accumulate", [False, True])
def test_dot4_u8s8_matches_numpy(target, lanes, accumulate):
    """With an accumulator (``c + dot``: one vpdpbusd on VNNI targets) and without, scalar and in
    vectors of every width; 48 lanes split into pieces no vpdpbusd width makes a power of two of."""
    A, B, C0 = (lw.placeholder((N,), name=n, dtype="int32") for n in ("A", "B", "C0"))
    if accumulate:
        C = lw.compute((N,), lambda i: C0[i] + dot4_u8s8(A[i], B[i]), name="C")
    else:
        C = lw.compute((N,), lambda i: dot4_u8s8(A[i], B[i]), name="C")
    s = lw.create_schedule(C)
    if lanes:
        _, inner = s[C].split(C.op.axis[0], factor=lanes)
        s[C].vectorize(inner)
    args = [A, B, C0, C] if accumulate else [A, B, C]
    f = lw.build(s, args, target=target)
    rng = np.random.default_rng(lanes or 1)
    a, b, c = _words(rng, N), _words(rng, N), rng.integers(-2 ** 20, 2 ** 20, N).astype(np.int32)
    out = np.zeros(N, np.int32)
    f(*([a, b, c] if accumulate else [a, b]), out)
    want = _reference(a, b) + (c if accumulate else 0)
    np.testing.assert_array_equal(out, want.astype(np.int32))


@pytest.mark.skipif(host_target().arch != "x86_64", reason="vpdpbusd is an x86 instruction")
def test_dot4_u8s8_is_one_vpdpbusd_where_the_target_has_vnni():
    A, B, C0 = (lw.placeholder((N,), name=n, dtype="int32") for n in ("A", "B", "C0"))
    C = lw.compute((N,), lambda i: C0[i] + dot4_u8s8(A[i], B[i]), name="C")
    s = lw.create_schedule(C)
    _, inner = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(inner)
    assert "vpdpbusd" in lw.build(s, [A, B, C0, C], target="llvm -mcpu=znver5").get_source("asm")
    assert "vpdpbusd" not in lw.build(s, [A, B, C0, C], target="llvm -mcpu=x86-64-v3").get_source("asm")


def test_dot4_u8s8_takes_int32_words_only():
    A = lw.placeholder((4,), name="A", dtype="uint8")
    B = lw.placeholder((4,), name="B", dtype="int32")
    with pytest.raises(DTypeError, match="dot4_u8s8 takes two int32 words"):
        dot4_u8s8(A[0], B[0])
