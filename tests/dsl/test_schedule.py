"""Schedule primitives (loopweave.dsl.schedule): effect on leaf axes, relations, annotations, attach points."""
import pytest

import loopweave as lw
from loopweave.dsl.relations import Fuse, Split
from loopweave.dsl.validate import legal_attach_points


def _names(ivs):
    return [iv.name for iv in ivs]


@pytest.fixture
def chain():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((n, n), lambda i, j: B[i, j] * 2.0, name="C")
    return n, A, B, C


@pytest.fixture
def matmul():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    Bm = lw.placeholder((n, n), name="Bm")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * Bm[k, j], axis=k), name="C")
    return n, A, Bm, k, C


def test_create_schedule_stages_in_producer_order(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    assert [st.name for st in s.stages] == ["A", "B", "C"]
    assert s[C].is_output and not s[B].is_output
    assert s[B] is s[B.op]
    assert s.stage_by_name("B") is s[B]
    assert all(st.attach_type == "root" for st in s.stages)
    assert _names(s[C].leaf_iter_vars) == ["i", "j"]


def test_split_factor(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=8)
    assert _names(s[C].leaf_iter_vars) == ["i.outer", "i.inner", "j"]
    assert ii.extent.value == 8
    assert str(io.extent) == "(n + 7) // 8"
    rel = s[C].relations[-1]
    assert isinstance(rel, Split) and rel.parent is i and rel.outer is io and rel.inner is ii
    assert rel.factor.value == 8 and rel.nparts is None


def test_split_nparts(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, nparts=4)
    assert jo.extent.value == 4
    assert str(ji.extent) == "(n + 3) // 4"
    assert _names(s[C].leaf_iter_vars) == ["i", "j.outer", "j.inner"]


def test_split_by_symbolic_factor(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    m = lw.var("m")
    io, ii = s[C].split(C.op.axis[0], factor=m)
    assert ii.extent is m


def test_split_names_stay_unique(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    iio, iii = s[C].split(ii, factor=2)
    names = _names(s[C].all_iter_vars)
    assert len(names) == len(set(names))


def test_fuse(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    f = s[C].fuse(i, j)
    assert s[C].leaf_iter_vars == [f]
    assert str(f.extent) == "n * n"
    assert isinstance(s[C].relations[-1], Fuse)
    # list form
    s2 = lw.create_schedule(C)
    f2 = s2[C].fuse([C.op.axis[0], C.op.axis[1]])
    assert s2[C].leaf_iter_vars == [f2]


def test_reorder(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(j, io)
    assert _names(s[C].leaf_iter_vars) == ["j", "i.inner", "i.outer"]


def test_tile(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 4)
    assert s[C].leaf_iter_vars == [io, jo, ii, ji]
    assert ii.extent.value == 8 and ji.extent.value == 4


@pytest.mark.parametrize("primitive, kind", [("vectorize", "vectorize"), ("parallel", "parallel"),
                                             ("unroll", "unroll")])
def test_annotations(chain, primitive, kind):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    getattr(s[C], primitive)(j)
    assert s[C].annotations == {j: kind}
    getattr(s[C], primitive)(j)   # idempotent
    assert s[C].annotations == {j: kind}


def test_bind(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    bx = lw.thread_axis("blockIdx.x")
    s[C].bind(i, bx)
    assert s[C].annotations[i] == "bind" and s[C].bound_threads[i] is bx


def test_pragma(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    i, j = C.op.axis
    s[C].pragma(i, "auto_unroll_max_step", 16)
    s[C].pragma(i, "debug")
    assert s[C].pragmas[i] == [("auto_unroll_max_step", 16), ("debug", None)]
    assert "auto_unroll_max_step=16" in str(lw.lower(s, [A, C]))


def test_storage_align(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    s[B].storage_align(B.op.axis[0], 8, 1)
    assert s[B].storage_aligns == {0: (8, 1)}


def test_compute_at_sets_attach_point(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    assert s[B].attach_type == "scope" and s[B].attach_stage is s[C] and s[B].attach_ivar is io
    assert "computes B" in str(s)
    s[B].compute_root()
    assert s[B].attach_type == "root" and s[B].attach_stage is None and s[B].attach_ivar is None


def test_compute_inline(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    s[B].compute_inline()
    assert s[B].attach_type == "inline"
    text = str(lw.lower(s, [A, C]))
    assert "allocate" not in text and "(A[" in text


def test_consumers_look_through_inlined_stages():
    A = lw.placeholder((8,), name="A")
    B = lw.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = lw.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = lw.compute((8,), lambda i: C[i] - 1.0, name="D")
    s = lw.create_schedule(D)
    s[C].compute_inline()
    assert s.consumers_of(s[B]) == [s[D]]
    s[B].compute_at(s[D], D.op.axis[0])
    assert s[B].attach_stage is s[D]


def _softmax():
    A = lw.placeholder((6, 10), name="A")
    k = lw.reduce_axis((0, 10), name="k")
    M = lw.compute((6,), lambda i: lw.max(A[i, k], axis=k), name="M")
    E = lw.compute((6, 10), lambda i, j: lw.exp(A[i, j] - M[i]), name="E")
    k2 = lw.reduce_axis((0, 10), name="k2")
    S = lw.compute((6,), lambda i: lw.sum(E[i, k2], axis=k2), name="S")
    C = lw.compute((6, 10), lambda i, j: E[i, j] / S[i], name="C")
    return A, M, E, S, C


@pytest.mark.parametrize("order", [("M", "E", "S"), ("S", "E", "M"), ("E", "M", "S")])
def test_attach_order_does_not_matter(order):
    """TOPI's CPU softmax attaches the row max, the exponentials and their sum at the output's row
    loop in that order, each before the stage reading it is placed; any order lowers to the same IR."""
    A, M, E, S, C = _softmax()
    s = lw.create_schedule(C)
    stages = {"M": M, "E": E, "S": S}
    for name in order:
        s[stages[name]].compute_at(s[C], C.op.axis[0])
    reference = lw.create_schedule(C)
    for name in ("S", "E", "M"):          # consumers first: the order every check was happy with before
        reference[stages[name]].compute_at(reference[C], C.op.axis[0])
    assert str(lw.lower(s, [A, C])) == str(lw.lower(reference, [A, C]))


def test_legal_attach_points_follow_the_rest_of_the_schedule():
    A, M, E, S, C = _softmax()
    s = lw.create_schedule(C)
    i, j = C.op.axis
    assert [(h.name, a.name) for h, a in legal_attach_points(s, s[M])] == [("E", "i"), ("E", "j")]
    s[E].compute_at(s[C], i)               # E now runs inside C's row loop: M may go there too
    assert ("C", "i") in [(h.name, a.name) for h, a in legal_attach_points(s, s[M])]
    assert ("C", "j") not in [(h.name, a.name) for h, a in legal_attach_points(s, s[M])]  # E runs outside j
    assert legal_attach_points(s, s[C]) == []                                             # nothing reads C


def test_cache_read(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    AL = s.cache_read(A, "local", [B])
    assert [st.name for st in s.stages] == ["A", "A.local", "B", "C"]
    assert s[AL].scope == "local"
    assert s[B].op.input_tensors == [AL]


def test_cache_write(matmul):
    n, A, Bm, k, C = matmul
    s = lw.create_schedule(C)
    CL = s.cache_write(C, "local")
    assert [st.name for st in s.stages] == ["A", "Bm", "C.local", "C"]
    assert s[CL].scope == "local"
    assert s[CL].op.reduce_axis and not s[C].op.reduce_axis  # C became a copy
    assert s[C].op.input_tensors == [CL]
    assert _names(s[CL].leaf_iter_vars) == ["i.c", "j.c", "k"]


def test_rfactor(matmul):
    n, A, Bm, k, C = matmul
    s = lw.create_schedule(C)
    ko, ki = s[C].split(k, factor=4)
    CF = s.rfactor(C, ki)
    assert [st.name for st in s.stages] == ["A", "Bm", "C.rf", "C"]
    assert CF.ndim == 3 and CF.shape[0].value == 4
    assert [iv.kind for iv in s[CF].op.axis] == ["spatial"] * 3
    assert [iv.kind for iv in s[C].leaf_iter_vars] == ["spatial", "spatial", "reduce"]
    # the factored axis is now spatial, so it may be vectorized
    s[CF].vectorize(s[CF].op.axis[0])


def test_current_tensor_follows_cache_write(matmul):
    n, A, Bm, k, C = matmul
    s = lw.create_schedule(C)
    s.cache_write(C, "local")
    assert s.current_tensor(C).op is s[C].op


def test_axis_by_name(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    assert s[C].axis_by_name("i") is C.op.axis[0]
    with pytest.raises(lw.ScheduleError, match="stage 'C' has no axis named 'zz'; its axes: i, j"):
        s[C].axis_by_name("zz")


def test_schedule_repr_and_html(chain):
    n, A, B, C = chain
    s = lw.create_schedule(C)
    assert repr(s) == "Schedule(A, B, C)"
    assert repr(s[C]) == "Stage(C)"
    for html in (s._repr_html_(), s[C]._repr_html_()):
        assert html.lstrip().startswith("<") and "C" in html


def test_a_schedule_survives_pickling_with_rewritten_stages():
    """Build workers receive schedules pickled: handles (old ops of rewritten stages too) must still
    find their stages, and the copy must lower to the same loops."""
    import pickle
    n = 64
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[CC].compute_at(s[C], jo)
    s[C].vectorize(ji)
    copy_s, (cA, cB, cC) = pickle.loads(pickle.dumps((s, [A, B, C])))
    assert copy_s[cC] is copy_s.stages[-1]
    assert str(lw.lower(copy_s, [cA, cB, cC])) == str(lw.lower(s, [A, B, C]))
