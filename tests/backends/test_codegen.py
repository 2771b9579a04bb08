"""Native code through the LLVM backend: dtypes, parallel loops, FMA vector code, the on-disk cache."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loopweave as lw
from loopweave.target import host_target


def _binary_kernel(dtype, fcompute):
    n = lw.var("n")
    X = lw.placeholder((n,), name="X", dtype=dtype)
    Y = lw.placeholder((n,), name="Y", dtype=dtype)
    Z = lw.compute((n,), lambda i: fcompute(X[i], Y[i]), name="Z")
    return lw.build(lw.create_schedule(Z), [X, Y, Z])


def _inputs(dtype, size=37, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(size) < 0.5, rng.random(size) < 0.5
    if dtype.startswith("float"):
        return rng.standard_normal(size).astype(dtype), rng.standard_normal(size).astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = max(info.min, -30), min(info.max, 30)
    return rng.integers(lo, hi, size).astype(dtype), rng.integers(1, hi, size).astype(dtype)


def test_bool_kernel():
    f = _binary_kernel("bool", lambda x, y: x & ~y | (x == y))
    x, y = _inputs("bool")
    z = np.empty_like(x)
    f(x, y, z)
    np.testing.assert_array_equal(z, (x & ~y) | (x == y))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_integer_kernels(dtype):
    f = _binary_kernel(dtype, lambda x, y: lw.max(x * 3 - y, x // y) + x % y)
    x, y = _inputs(dtype)
    z = np.empty_like(x)
    f(x, y, z)
    with np.errstate(over="ignore"):
        three = np.array(3, dtype)
        expected = np.maximum(x * three - y, x // y) + x % y   # floor semantics, wrap-around like numpy
    np.testing.assert_array_equal(z, expected)


@pytest.mark.parametrize("dtype, rtol", [("float16", 2e-3), ("float32", 1e-6), ("float64", 1e-12)])
def test_float_kernels(dtype, rtol):
    f = _binary_kernel(dtype, lambda x, y: x * y - x / 2 + lw.abs(y))
    x, y = _inputs(dtype)
    z = np.empty_like(x)
    f(x, y, z)
    np.testing.assert_allclose(z, x * y - x / np.array(2, dtype) + np.abs(y), rtol=rtol, atol=rtol)


def test_float_intrinsics():
    f = _binary_kernel("float64", lambda x, y: lw.exp(x) + lw.sqrt(lw.abs(y)) + lw.tanh(x))
    x, y = _inputs("float64")
    z = np.empty_like(x)
    f(x, y, z)
    np.testing.assert_allclose(z, np.exp(x) + np.sqrt(np.abs(y)) + np.tanh(x), rtol=1e-12)


def test_parallel_loop_computes_right():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = lw.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].parallel(io)
    jo, ji = s[B].split(B.op.axis[1], factor=8)
    s[B].vectorize(ji)
    f = lw.build(s, [A, B])
    for size in (1, 13, 64):
        a = np.random.default_rng(811).random((size, size)).astype("float32")
        b = np.empty_like(a)
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def test_parallel_reduction_computes_right():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    B = lw.compute((n,), lambda i: lw.sum(A[i, k], axis=k), name="B")
    s = lw.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    f = lw.build(s, [A, B])
    a = np.random.default_rng(951).random((50, 50)).astype("float32")
    b = np.empty(50, "float32")
    f(a, b)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)


def test_parallel_loop_after_another_2d_nest():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((n, n), lambda i, j: B[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    f = lw.build(s, [A, C])
    a = np.random.default_rng(1091).random((9, 9)).astype("float32")
    c = np.empty_like(a)
    f(a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


@pytest.mark.skipif(not host_target().has_fma, reason="the host CPU has no FMA")
def test_vectorized_fp32_fma_uses_vfmadd_on_ymm():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.placeholder((n,), name="B")
    C = lw.placeholder((n,), name="C")
    D = lw.compute((n,), lambda i: A[i] * B[i] + C[i], name="D")
    s = lw.create_schedule(D)
    io, ii = s[D].split(D.op.axis[0], factor=8)
    s[D].vectorize(ii)
    f = lw.build(s, [A, B, C, D])
    asm = f.get_source("asm")
    assert "vfmadd" in asm and "ymm" in asm
    a, b, c = np.random.default_rng(1281).random((3, 29)).astype("float32")
    d = np.empty_like(a)
    f(a, b, c, d)
    np.testing.assert_allclose(d, a * b + c, rtol=1e-6)


# ------------------------------------------------------------------ on-disk cache

_CACHE_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, loopweave as lw
    from loopweave.backends.llvm import jit
    if sys.argv[1] == "forbid-compile":
        def no_compile(*a, **k):
            raise AssertionError("optimised and compiled again instead of loading the cached object")
        jit.optimize = no_compile
        if hasattr(jit, "compile_ir"):
            jit.compile_ir = no_compile
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 3.0 + 0.25, name="B")
    s = lw.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    f = lw.build(s, [A, B])
    a = np.arange(21, dtype="float32"); b = np.empty_like(a)
    f(a, b)
    assert np.allclose(b, a * 3 + 0.25)
    print("ok")
""")


def test_object_cache_is_reused_by_a_fresh_process(tmp_path, monkeypatch):
    cache = tmp_path / "lwcache"
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(cache))
    env = dict(os.environ)
    script = tmp_path / "kernel.py"
    script.write_text(_CACHE_SCRIPT)

    def run(mode):
        out = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"

    run("compile")
    first = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.o")}
    assert first                          # the first build wrote its object code
    run("forbid-compile")                 # would fail if it compiled instead of loading the cached .o
    second = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.o")}
    assert second == first                # no new object, the old one untouched
    assert not list(cache.glob("*.tmp"))


@pytest.mark.parametrize("vector", [False, True])
def test_double_to_half_is_correctly_rounded_without_a_libcall(vector):
    """float64 -> float16 goes through float32 with round-to-odd (no __truncdfhf2, which
    MCJIT cannot resolve with an older libgcc); numpy rounds directly, and they must agree,
    also where a plain two-step rounding would round twice."""
    h = np.arange(1, 2048, dtype=np.uint16).view(np.float16).astype(np.float64)     # some halves
    nxt = np.nextafter(h.astype(np.float16), np.float16(np.inf)).astype(np.float64)
    mid = (h + nxt) / 2                                       # ties: round to even
    above = np.nextafter(mid, np.inf)                         # a hair above a tie: rounds up, but
    below = np.nextafter(mid, -np.inf)                        # float32 alone would round to the tie
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 1e300, -1e300, 1e-300, -1e-300,
                        5.960464477539063e-08, 2.9802322387695312e-08, 2.98023223876953125e-08 * 1.0000001])
    x = np.concatenate([mid, above, below, -above, rng.standard_normal(1000) * 100, special])
    n = len(x) - len(x) % 16
    x = x[:n]
    A = lw.placeholder((n,), name="A", dtype="float64")
    B = lw.compute((n,), lambda i: lw.cast("float16", A[i]), name="B")
    s = lw.create_schedule(B)
    if vector:
        _, inner = s[B].split(B.op.axis[0], factor=16)
        s[B].vectorize(inner)
    f = lw.build(s, [A, B])
    assert "truncdfhf2" not in f.get_source("asm")
    out = np.empty(n, np.float16)
    f(x, out)
    with np.errstate(over="ignore"):          # 1e300 -> inf is the expected result
        expected = x.astype(np.float16)
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vector", [False, True])
def test_fmod_is_exact(dtype, vector):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(64) * 1e6).astype(dtype)
    y = (rng.standard_normal(64) * 3).astype(dtype)
    y[:4] = [np.inf, -np.inf, 1e-30, 7.0]
    A, B = lw.placeholder((64,), name="A", dtype=dtype), lw.placeholder((64,), name="B", dtype=dtype)
    C = lw.compute((64,), lambda i: lw.fmod(A[i], B[i]), name="C")
    s = lw.create_schedule(C)
    if vector:
        _, inner = s[C].split(C.op.axis[0], factor=8)
        s[C].vectorize(inner)
    out = np.empty(64, dtype)
    lw.build(s, [A, B, C])(x, y, out)
    np.testing.assert_array_equal(out, np.fmod(x, y))
    with pytest.raises(lw.DTypeError, match="lw.fmod needs float"):
        lw.fmod(lw.placeholder((2,), dtype="int32")[0], 2)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("vector", [False, True])
def test_floor_division_and_modulo_by_a_positive_constant_round_down_for_negatives(dtype, vector):
    """By a constant that is no power of two, // and % are LLVM's truncating sdiv/srem corrected by
    the remainder's sign (-7 // 7 == -1, -8 // 7 == -2, -8 % 7 == 6)."""
    A = lw.placeholder((64,), name="A", dtype=dtype)
    Q = lw.compute((64,), lambda i: A[i] // 7, name="Q")
    R = lw.compute((64,), lambda i: A[i] % 7, name="R")
    s = lw.create_schedule([Q, R])
    if vector:
        for t in (Q, R):
            _, inner = s[t].split(s[t].op.axis[0], factor=8)
            s[t].vectorize(inner)
    f = lw.build(s, [A, Q, R])
    a = np.arange(-40, 24).astype(dtype)
    q, r = np.empty(64, dtype), np.empty(64, dtype)
    f(a, q, r)
    np.testing.assert_array_equal(q, a // 7)
    np.testing.assert_array_equal(r, a % 7)


def test_lane_constants_are_shared_per_type_and_values():
    """One constant object per (element type, values), so llvmlite prints it once; another type or
    other values is another constant."""
    from loopweave.backends.llvm.codegen import I32, I64, _lane_constant
    steps = _lane_constant(I64, (0, 1, 2, 3))
    assert _lane_constant(I64, (0, 1, 2, 3)) is steps
    assert str(steps) == "<4 x i64> <i64 0, i64 1, i64 2, i64 3>"
    assert str(_lane_constant(I32, (0, 1, 2, 3))) == "<4 x i32> <i32 0, i32 1, i32 2, i32 3>"
    assert str(_lane_constant(I64, (0, 1, 2, 3, 4, 5, 6, 7))).startswith("<8 x i64>")
    assert str(_lane_constant(I32, (0,) * 4)) == "<4 x i32> <i32 0, i32 0, i32 0, i32 0>"


@pytest.mark.parametrize("vector", [False, True])
def test_a_chain_of_selects_reads_its_operands_once(vector):
    """Each select whose branches read memory reuses what its condition computed: ``x`` of
    ``x = select(x > b, x, b - x)`` applied three times is loaded once, not 3 ** 3 times, and the
    branches, which then read nothing new, are a select rather than branches."""
    from loopweave.backends.llvm.codegen import CodeGen
    n = 64 if vector else lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.placeholder((n,), name="B")

    def body(i):
        x = A[i] + B[i]
        for _ in range(3):
            x = lw.select(x > B[i], x, B[i] - x)
        return x

    C = lw.compute((n,), body, name="C")
    s = lw.create_schedule(C)
    if vector:
        s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    text = CodeGen(lw.lower(s, [A, B, C]), host_target(), "chain").generate()
    loads = [line for line in text.splitlines() if " = load float" in line or " = load <8 x float>" in line]
    assert len(loads) == 2 and not re.search(r"phi\s+(float|<8)", text) and "masked.load" not in text, text
    a, b = _inputs("float32", size=64)
    c = np.empty_like(a)
    lw.build(s, [A, B, C])(a, b, c)
    x = a + b
    for _ in range(3):
        x = np.where(x > b, x, b - x)
    np.testing.assert_allclose(c, x, rtol=1e-6)


def test_a_select_whose_branch_reads_anew_stays_a_branch_and_reuses_the_condition_s_reads():
    """``select(A[i] > 0, A[i], B[i])``: B is read only where the condition is false (a guarded
    read must not touch memory otherwise), and A, read by the condition, is not read again."""
    from loopweave.backends.llvm.codegen import CodeGen
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.placeholder((n,), name="B")
    C = lw.compute((n,), lambda i: lw.select(A[i] > 0, A[i], B[i]), name="C")
    s = lw.create_schedule(C)
    text = CodeGen(lw.lower(s, [A, B, C]), host_target(), "guarded").generate()
    body = text.split("phi  i64")[1]
    loads = [line for line in body.splitlines() if " = load float" in line]
    assert len(loads) == 2 and re.search(r"phi\s+float", body), text
    assert body.index("fcmp") < body.index(loads[1]), "B is read before the condition picks it"
    a, b = _inputs("float32")
    c = np.empty_like(a)
    lw.build(s, [A, B, C])(a, b, c)
    np.testing.assert_array_equal(c, np.where(a > 0, a, b))
