"""Whole printed IR of representative kernels, compared with golden files in tests/lowering/golden/.

A substring test says one thing is there; a golden file shows everything a change to a pass did
to the code it lowers: each file holds the IR after every pass that changed it (from
``dump_after="all"``; a pass that changed nothing is not listed) and the final function.  After an intended change, rewrite the files with
``pytest tests/lowering/test_golden.py --update-golden`` and read the diff.
"""
from pathlib import Path

import pytest

import loopweave as lw

GOLDEN = Path(__file__).parent / "golden"


def _matmul(n):
    A, B = lw.placeholder((n, n), name="A"), lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def matmul_split_vectorize_parallel():
    """A 64 x 64 matmul tiled 8 x 8, its reduction split by 4, vectorized and parallel."""
    A, B, C = _matmul(64)
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C], None


def compute_at_producer():
    """An elementwise producer computed at its consumer's row: one row of it per row."""
    n, m = lw.var("n"), lw.var("m")
    A = lw.placeholder((n, m), name="A")
    B = lw.compute((n, m), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((n, m), lambda i, j: B[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    return s, [A, C], None


def cache_write_accumulator():
    """A matmul accumulating an 8 x 8 tile in a local buffer (cache_write) computed at the tile."""
    A, B, C = _matmul(32)
    s = lw.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 8)
    s[CL].compute_at(s[C], jo)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    s[CL].reorder(k, ci, cj)
    s[CL].vectorize(cj)
    s[C].vectorize(ji)
    return s, [A, B, C], None


def rfactor_sum():
    """A row sum split by 4 and factored (rfactor) at each row: 4 partial sums, then their sum."""
    A = lw.placeholder((16, 64), name="A")
    k = lw.reduce_axis((0, 64), name="k")
    S = lw.compute((16,), lambda i: lw.sum(A[i, k], axis=k), name="S")
    s = lw.create_schedule(S)
    ko, ki = s[S].split(k, factor=4)
    SF = s.rfactor(S, ki)
    s[SF].compute_at(s[S], S.op.axis[0])
    return s, [A, S], None


def tail_loop():
    """A symbolic extent split by 8 and vectorized: a guard-free vector main part and a scalar tail."""
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = lw.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(i)
    return s, [A, B], None


def gpu_matmul():
    """A 64 x 64 matmul for CUDA: blocks of 16 x 16 threads, panels of A and B in shared memory."""
    A, B, C = _matmul(64)
    s = lw.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    i, j = C.op.axis
    by, ty = s[C].split(i, factor=16)
    bx, tx = s[C].split(j, factor=16)
    s[C].reorder(by, bx, ty, tx)
    for axis, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(axis, lw.thread_axis(tag))
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s[C].reorder(ko, ki)
    for S in (AA, BB):
        s[S].compute_at(s[C], ko)
        y, x = s[S].op.axis
        s[S].bind(y, lw.thread_axis("threadIdx.y"))
        s[S].bind(x, lw.thread_axis("threadIdx.x"))
    return s, [A, B, C], "cuda"


KERNELS = [matmul_split_vectorize_parallel, compute_at_producer, cache_write_accumulator, rfactor_sum, tail_loop,
           gpu_matmul]


def lowered_text(make) -> str:
    """The IR after each pass that changed it, then the lowered function."""
    s, args, target = make()
    func = lw.lower(s, args, dump_after="all", target=target)
    sections = [f"# {make.__name__}: {make.__doc__}"]
    previous = None
    for name, body in func.dumps.items():
        text = str(func.with_body(body))
        if text != previous:        # a pass that changed nothing here is left out: the file shows changes
            sections.append(f"## after {name}\n{text}")
        previous = text
    sections.append(f"## lowered\n{func}")
    return "\n\n".join(sections) + "\n"


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / f"{name}.txt"
    if update:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"no golden file {path}; write it with pytest {__file__} --update-golden")
    expected = path.read_text()
    assert text == expected, (f"the printed IR of {name} differs from {path}; if the change is intended, "
                              f"rewrite it with --update-golden and review the diff")


@pytest.mark.parametrize("make", KERNELS, ids=lambda f: f.__name__)
def test_printed_ir_matches_the_golden_file(make, update_golden):
    check_golden(make.__name__, lowered_text(make), update_golden)


def test_golden_files_are_all_used():
    """A kernel removed from KERNELS takes its golden file with it."""
    names = {f.__name__ for f in KERNELS}
    assert {p.stem for p in GOLDEN.glob("*.txt")} <= names
