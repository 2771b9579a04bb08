"""Bundled example kernels (used by ``loopweave demo``, the benchmarks and the docs).

Each function declares a computation, schedules it with the public primitives and
returns ``(compiled module, schedule)``.
"""
from __future__ import annotations



def matmul_kernel(tile: int = 32, k_split: int = 4, target="llvm"):
    """The matmul of docs/design.md: tile 32x32, split k, vectorize inner j, parallel outer i."""
    import loopweave as lw
    s, args = design_matmul_schedule(tile, k_split)
    return lw.build(s, args, target=target), s


def design_matmul_schedule(tile: int = 32, k_split: int = 4):
    """(schedule, args) of the matmul example in docs/design.md, symbolic in n."""
    import loopweave as lw
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A", dtype="float32")
    B = lw.placeholder((n, n), name="B", dtype="float32")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, tile, tile)
    ko, ki = s[C].split(k, factor=k_split)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


def stencil_kernel(tile: int = 32, target="llvm"):
    """A separable 3x3 box blur: the horizontal pass computed per tile of the vertical one."""
    import loopweave as lw
    n = lw.var("n")
    X = lw.placeholder((n, n), name="X", dtype="float32")
    BX = lw.compute((n, n - 2), lambda i, j: (X[i, j] + X[i, j + 1] + X[i, j + 2]) / 3.0, name="BX")
    Y = lw.compute((n - 2, n - 2), lambda i, j: (BX[i, j] + BX[i + 1, j] + BX[i + 2, j]) / 3.0, name="Y")
    s = lw.create_schedule(Y)
    i, j = Y.op.axis
    io, jo, ii, ji = s[Y].tile(i, j, tile, tile)
    s[BX].compute_at(s[Y], jo)
    s[Y].vectorize(ji)
    s[Y].parallel(io)
    return lw.build(s, [X, Y], target=target), s
