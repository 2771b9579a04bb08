"""``dot4_u8s8`` and ``dot2_i16``: the int32 sums of byte (uint8 by int8) and int16 products, on every CPU target."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.intrinsics import dot2_i16, dot4_u8s8
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


@pytest.mark.parametrize("target", _targets() + ["llvm -mtriple=aarch64-linux-gnu"])
@pytest.mark.parametrize("lanes", [None, 4, 8, 16, 32, 48])
def test_dot2_i16_matches_numpy(target, lanes):
    """The two int16 halves' products summed, scalar and in vectors (pmaddwd on x86, the widened
    form elsewhere; an AArch64 build is checked to compile); the extremes included."""
    A, B = (lw.placeholder((N,), name=n, dtype="int32") for n in ("A", "B"))
    C = lw.compute((N,), lambda i: dot2_i16(A[i], B[i]), name="C")
    s = lw.create_schedule(C)
    if lanes:
        _, inner = s[C].split(C.op.axis[0], factor=lanes)
        s[C].vectorize(inner)
    f = lw.build(s, [A, B, C], target=target)
    if "aarch64" in target:
        assert f.get_source("asm")
        return
    rng = np.random.default_rng(lanes or 2)
    a, b = _words(rng, N), _words(rng, N)
    a[:2], b[:2] = np.int32(-0x7FFF8000), np.int32(-0x7FFF8000)      # (-32768, -32768) halves: 2^31 overflows
    out = np.zeros(N, np.int32)
    f(a, b, out)
    ha, hb = a.view(np.int16).reshape(N, 2).astype(np.int64), b.view(np.int16).reshape(N, 2).astype(np.int64)
    want = (ha * hb).sum(-1)
    np.testing.assert_array_equal(out, want.astype(np.int32))     # wraps as pmaddwd does at 2 x (-32768)^2


def test_dot2_i16_takes_int32_words_only():
    with pytest.raises(DTypeError, match="dot2_i16 takes two int32 words"):
        dot2_i16(lw.placeholder((4,), name="A", dtype="int16")[0], lw.placeholder((4,), name="B", dtype="int32")[0])
