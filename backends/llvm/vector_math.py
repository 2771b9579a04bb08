"""exp, erf and tanh for float32 as inline polynomials, so vector code stays vector.

LLVM lowers ``llvm.exp.v16f32`` and libm calls to one scalar call per lane (there is no
vector math library on the host), which made softmax, sigmoid and GELU cost more than
the matmuls around them.  These are the classic branch-free approximations:

- exp: Cephes ``expf`` (range reduction by ln 2, degree-6 polynomial), scaled by 2^n in
  two halves so results down to the denormals and up to FLT_MAX are right; inf, -inf and
  NaN behave as in libm.  About 1 ulp.
- erf: Eigen's rational approximation on [-4, 4] (|error| < 1e-7 in exact arithmetic),
  exactly +-1 beyond.
- tanh: Eigen's rational approximation on [-7.9, 7.9] (relative error < 3e-7), +-1
  beyond; small inputs keep their relative accuracy (the numerator is odd).

Each function takes an llvmlite builder, a float32 scalar or vector value and the
callbacks ``fma(a, b, c)`` and ``floor(x)``, and returns a value of the same type.
"""
from __future__ import annotations

import math

from llvmlite import ir

I32 = ir.IntType(32)


def _splat(t, value):
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [value] * t.count)
    return ir.Constant(t, value)


def _int_type_like(t):
    return ir.VectorType(I32, t.count) if isinstance(t, ir.VectorType) else I32


def _horner(b, fma, x, coeffs):
    """coeffs[0] + coeffs[1] x + ... evaluated with fused multiply-adds."""
    t = x.type
    acc = _splat(t, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = fma(acc, x, _splat(t, c))
    return acc


def _clamp(b, x, lo, hi):
    """min(max(x, lo), hi) that keeps NaN (comparisons with NaN are false)."""
    t = x.type
    x = b.select(b.fcmp_ordered("<", x, _splat(t, lo)), _splat(t, lo), x)
    return b.select(b.fcmp_ordered(">", x, _splat(t, hi)), _splat(t, hi), x)


def _pow2(b, n_int):
    """2^n as float32 for an i32 (vector) n in [-126, 127], by building the exponent bits."""
    it = n_int.type
    bits = b.shl(b.add(n_int, _splat(it, 127)), _splat(it, 23))
    ft = ir.VectorType(ir.FloatType(), it.count) if isinstance(it, ir.VectorType) else ir.FloatType()
    return b.bitcast(bits, ft)


EXP_HI = 88.72283935546875       # above: +inf (ln FLT_MAX = 88.7228...)
EXP_LO = -103.97208404541016     # below: 0 (smallest denormal is 2^-149)


def exp_f32(b: ir.IRBuilder, x, fma, floor):
    t = x.type
    xc = _clamp(b, x, EXP_LO, EXP_HI)
    fx = fma(xc, _splat(t, 1.44269504088896341), _splat(t, 0.5))
    fx = floor(fx)
    r = fma(fx, _splat(t, -0.693359375), xc)
    r = fma(fx, _splat(t, 2.12194440e-4), r)
    poly = _horner(b, fma, r, [5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3,
                               1.3981999507e-3, 1.9875691500e-4])
    rr = b.fmul(r, r)
    y = fma(poly, rr, b.fadd(r, _splat(t, 1.0)))
    n = b.fptosi(fx, _int_type_like(t))
    half = b.ashr(n, _splat(n.type, 1))
    y = b.fmul(b.fmul(y, _pow2(b, half)), _pow2(b, b.sub(n, half)))
    y = b.select(b.fcmp_ordered(">", x, _splat(t, EXP_HI)), _splat(t, math.inf), y)
    y = b.select(b.fcmp_ordered("<", x, _splat(t, EXP_LO)), _splat(t, 0.0), y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


_ERF_NUM = [-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
            -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10]
_ERF_DEN = [-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
            -1.45660718464996e-05]


def erf_f32(b: ir.IRBuilder, x, fma, floor=None):
    xc = _clamp(b, x, -4.0, 4.0)
    x2 = b.fmul(xc, xc)
    num = b.fmul(xc, _horner(b, fma, x2, _ERF_NUM))
    return b.fdiv(num, _horner(b, fma, x2, _ERF_DEN))


_TANH_NUM = [4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
             -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16]
_TANH_DEN = [4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06]
TANH_CLAMP = 7.90531110763549805


def tanh_f32(b: ir.IRBuilder, x, fma, floor=None):
    xc = _clamp(b, x, -TANH_CLAMP, TANH_CLAMP)
    x2 = b.fmul(xc, xc)
    num = b.fmul(xc, _horner(b, fma, x2, _TANH_NUM))
    return b.fdiv(num, _horner(b, fma, x2, _TANH_DEN))


VECTOR_MATH = {"exp": exp_f32, "erf": erf_f32, "tanh": tanh_f32}
