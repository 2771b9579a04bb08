"""The error catalogue, in the style of Halide's test/error: one test per misuse, each checking the
exception type and the message (which must name the stage and the axis where there is one)."""
import numpy as np
import pytest

import loopweave as lw


@pytest.fixture
def p():
    """A small pipeline: B = A + 1, C = 2 * B, D[i] = sum_k C[i, k]."""
    class P:
        pass
    p = P()
    p.n = lw.var("n")
    p.A = lw.placeholder((p.n, p.n), name="A")
    p.B = lw.compute((p.n, p.n), lambda i, j: p.A[i, j] + 1.0, name="B")
    p.C = lw.compute((p.n, p.n), lambda i, j: p.B[i, j] * 2.0, name="C")
    p.k = lw.reduce_axis((0, p.n), name="k")
    p.D = lw.compute((p.n,), lambda i: lw.sum(p.C[i, p.k], axis=p.k), name="D")
    p.E = lw.compute((p.n,), lambda i: p.D[i] + 1.0, name="E")
    p.s = lw.create_schedule(p.E)
    return p


# ------------------------------------------------------------------ schedule primitives

def test_reorder_axes_of_two_stages(p):
    ci, cj = p.C.op.axis
    bi, bj = p.B.op.axis
    with pytest.raises(lw.ScheduleError,
                       match=r"reorder on stage 'C': axis 'i' is not an axis of this stage; it belongs to stage 'B'"):
        p.s[p.C].reorder(cj, bi)


def test_reorder_same_axis_twice(p):
    ci, cj = p.C.op.axis
    with pytest.raises(lw.ScheduleError, match=r"reorder on stage 'C': an axis appears twice: j, j"):
        p.s[p.C].reorder(cj, cj)


@pytest.mark.parametrize("primitive", ["vectorize", "parallel"])
def test_vectorize_or_parallel_of_reduction_axis(p, primitive):
    with pytest.raises(lw.ScheduleError,
                       match=rf"{primitive} on stage 'D': axis 'k' is a reduction axis; {primitive} needs a spatial axis"
                             r"(.|\n)*fix: use rfactor"):
        getattr(p.s[p.D], primitive)(p.k)


def test_compute_at_an_axis_of_another_stage(p):
    bi, bj = p.B.op.axis
    with pytest.raises(lw.ScheduleError,
                       match=r"compute_at on stage 'B' \(at an axis of stage 'C'\): axis 'i' is not an axis of "
                             r"stage 'C'; it belongs to stage 'B'"):
        p.s[p.B].compute_at(p.s[p.C], bi)


def test_compute_at_own_loops(p):
    ci, cj = p.C.op.axis
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'C': a stage cannot be computed at its own loops"):
        p.s[p.C].compute_at(p.s[p.C], ci)


def test_compute_at_with_tensor_instead_of_stage(p):
    ci, cj = p.C.op.axis
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'B': the first argument must be a stage"):
        p.s[p.B].compute_at(p.C, ci)


def test_compute_at_of_an_output(p):
    di, = p.D.op.axis
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'E': this stage is an output of the schedule"):
        p.s[p.E].compute_at(p.s[p.D], di)


def test_split_of_axis_that_is_no_longer_a_leaf(p):
    ci, cj = p.C.op.axis
    p.s[p.C].split(ci, factor=4)
    with pytest.raises(lw.ScheduleError,
                       match=r"split on stage 'C': axis 'i' is no longer a leaf axis: it was split into 'i.outer' "
                             r"and 'i.inner'(.|\n)*fix: schedule the current leaf axes instead: i.outer, i.inner, j"):
        p.s[p.C].split(ci, factor=2)


def test_annotate_fused_away_axis(p):
    ci, cj = p.C.op.axis
    p.s[p.C].fuse(ci, cj)
    with pytest.raises(lw.ScheduleError, match=r"vectorize on stage 'C': axis 'j' is no longer a leaf axis: "
                                               r"it was fused into 'i.j.fused'"):
        p.s[p.C].vectorize(cj)


def test_fuse_of_non_adjacent_axes():
    A = lw.placeholder((4, 4, 4), name="A")
    B = lw.compute((4, 4, 4), lambda x, y, z: A[x, y, z] * 2.0, name="B")
    s = lw.create_schedule(B)
    x, y, z = B.op.axis
    with pytest.raises(lw.ScheduleError, match=r"fuse on stage 'B': axes x, z are not consecutive leaf axes in this "
                                               r"order \(leaf order: x, y, z\)(.|\n)*reorder them to be adjacent"):
        s[B].fuse(x, z)


def test_fuse_in_wrong_order(p):
    ci, cj = p.C.op.axis
    with pytest.raises(lw.ScheduleError, match=r"fuse on stage 'C': axes j, i are not consecutive leaf axes"):
        p.s[p.C].fuse(cj, ci)


def test_fuse_of_spatial_and_reduction_axis(p):
    di, = p.D.op.axis
    with pytest.raises(lw.ScheduleError, match=r"fuse on stage 'D': cannot fuse a reduction axis with a spatial axis "
                                               r"\(i:spatial, k:reduce\)"):
        p.s[p.D].fuse(di, p.k)


def test_fuse_of_one_axis(p):
    with pytest.raises(lw.ScheduleError, match=r"fuse on stage 'C': needs at least two axes, got 1"):
        p.s[p.C].fuse(p.C.op.axis[0])


@pytest.mark.parametrize("factor, pattern", [
    (0, r"factor must be at least 1, got 0"),
    (-3, r"factor must be at least 1, got -3"),
    (2.5, r"factor must be a positive int, got 2.5"),
    (4.0, r"factor must be a positive int, got 4.0"),
    ("4", r"factor must be a positive int, got '4'"),
    (True, r"factor must be a positive int, got True"),
])
def test_split_with_bad_factor(p, factor, pattern):
    with pytest.raises(lw.ScheduleError, match=r"split on stage 'C': " + pattern):
        p.s[p.C].split(p.C.op.axis[0], factor=factor)


def test_split_with_float_var_factor(p):
    with pytest.raises(lw.ScheduleError, match=r"split on stage 'C': factor must be an integer, got dtype float32"):
        p.s[p.C].split(p.C.op.axis[0], factor=lw.var("f", "float32"))


def test_split_with_bad_nparts(p):
    with pytest.raises(lw.ScheduleError, match=r"split on stage 'C': nparts must be at least 1, got 0"):
        p.s[p.C].split(p.C.op.axis[0], nparts=0)


def test_split_with_both_or_neither(p):
    with pytest.raises(lw.ScheduleError, match=r"split on stage 'C': give exactly one of factor= or nparts= for axis 'i'"):
        p.s[p.C].split(p.C.op.axis[0], factor=2, nparts=2)
    with pytest.raises(lw.ScheduleError, match=r"split on stage 'C': give exactly one of factor= or nparts="):
        p.s[p.C].split(p.C.op.axis[0])


def test_split_of_placeholder(p):
    with pytest.raises(lw.ScheduleError, match=r"split on stage 'A': a placeholder is an input and has no loops"):
        p.s[p.A].split(p.C.op.axis[0], factor=2)


def test_primitive_with_a_non_axis(p):
    with pytest.raises(lw.ScheduleError, match=r"vectorize on stage 'C': expected an axis \(IterVar\), got 3"):
        p.s[p.C].vectorize(3)


def test_conflicting_annotations(p):
    cj = p.C.op.axis[1]
    p.s[p.C].vectorize(cj)
    with pytest.raises(lw.ScheduleError, match=r"parallel on stage 'C': axis 'j' is already marked vectorize"):
        p.s[p.C].parallel(cj)


def test_fuse_of_annotated_axis(p):
    ci, cj = p.C.op.axis
    p.s[p.C].unroll(cj)
    with pytest.raises(lw.ScheduleError, match=r"fuse on stage 'C': axis 'j' is already annotated \(unroll\)"):
        p.s[p.C].fuse(ci, cj)


def test_compute_inline_of_a_reduction(p):
    with pytest.raises(lw.ScheduleError, match=r"compute_inline on stage 'D': a reduction cannot be inlined"
                                               r"(.|\n)*compute_at it inside the consumer"):
        p.s[p.D].compute_inline()


def test_compute_inline_of_an_output(p):
    with pytest.raises(lw.ScheduleError, match=r"compute_inline on stage 'E': an output stage cannot be inlined"):
        p.s[p.E].compute_inline()


def test_cache_write_after_split(p):
    p.s[p.D].split(p.D.op.axis[0], factor=4)
    with pytest.raises(lw.ScheduleError, match=r"cache_write of 'D': stage 'D' was already scheduled; call "
                                               r"cache_write before any other primitive on it"):
        p.s.cache_write(p.D, "local")


def test_cache_write_of_placeholder(p):
    with pytest.raises(lw.ScheduleError, match=r"cache_write of 'A': a placeholder has no computation to cache"):
        p.s.cache_write(p.A, "local")


def test_cache_with_unknown_scope(p):
    with pytest.raises(lw.ScheduleError, match=r"cache_write of 'D': unknown scope 'register'; use one of global, "
                                               r"shared, local"):
        p.s.cache_write(p.D, "register")
    with pytest.raises(lw.ScheduleError, match=r"cache_read of 'A': unknown scope 'foo'"):
        p.s.cache_read(p.A, "foo", [p.B])


def test_cache_read_for_a_stage_that_does_not_read(p):
    with pytest.raises(lw.ScheduleError, match=r"cache_read of 'A': stage 'C' does not read 'A'"):
        p.s.cache_read(p.A, "local", [p.C])


def test_rfactor_of_spatial_axis(p):
    with pytest.raises(lw.ScheduleError, match=r"rfactor on stage 'D': axis 'i' is spatial; rfactor takes a "
                                               r"reduction axis"):
        p.s.rfactor(p.D, p.D.op.axis[0])


def test_rfactor_of_non_reduction(p):
    with pytest.raises(lw.ScheduleError, match=r"rfactor on stage 'C': the stage is not a reduction"):
        p.s.rfactor(p.C, p.C.op.axis[0])


def test_rfactor_after_spatial_scheduling(p):
    p.s[p.D].split(p.D.op.axis[0], factor=4)
    with pytest.raises(lw.ScheduleError, match=r"rfactor on stage 'D': call rfactor before scheduling the stage's "
                                               r"spatial axes"):
        p.s.rfactor(p.D, p.k)


def test_rfactor_with_bad_factor_axis(p):
    with pytest.raises(lw.ScheduleError, match=r"rfactor on stage 'D': factor_axis must be an int in \[0, 1\], got 7"):
        p.s.rfactor(p.D, p.k, factor_axis=7)


def test_storage_align_errors(p):
    io, ii = p.s[p.B].split(p.B.op.axis[0], factor=4)
    with pytest.raises(lw.ScheduleError, match=r"storage_align on stage 'B': .*i.outer.* is not a root spatial axis"
                                               r"(.|\n)*pass one of i, j"):
        p.s[p.B].storage_align(io, 8, 1)
    with pytest.raises(lw.ScheduleError, match=r"storage_align on stage 'B': offset 9 must be smaller than factor 8"):
        p.s[p.B].storage_align(p.B.op.axis[0], 8, 9)
    with pytest.raises(lw.ScheduleError, match=r"storage_align on stage 'B': factor must be a positive int, got 0"):
        p.s[p.B].storage_align(p.B.op.axis[0], 0, 0)


def test_reorder_storage_errors(p):
    i, j = p.B.op.axis
    io, ii = p.s[p.B].split(i, factor=4)
    with pytest.raises(lw.ScheduleError, match=r"reorder_storage on stage 'B': .*i.outer.* is not a root spatial "
                                               r"axis(.|\n)*pass each of i, j once"):
        p.s[p.B].reorder_storage(j, io)
    with pytest.raises(lw.ScheduleError, match=r"reorder_storage on stage 'B': the axes must name every root "
                                               r"spatial axis once, got j, j"):
        p.s[p.B].reorder_storage(j, j)
    with pytest.raises(lw.ScheduleError, match=r"reorder_storage on stage 'E': this stage is an output"):
        p.s[p.E].reorder_storage(*p.E.op.axis)


def test_pragma_with_empty_key(p):
    with pytest.raises(lw.ScheduleError, match=r"pragma on stage 'C': the key must be a non-empty string"):
        p.s[p.C].pragma(p.C.op.axis[0], "")


def test_bind_to_a_non_thread_axis(p):
    ci, cj = p.C.op.axis
    with pytest.raises(lw.ScheduleError, match=r"bind on stage 'C': the second argument must be lw.thread_axis"):
        p.s[p.C].bind(ci, cj)


def test_bind_of_reduction_axis(p):
    with pytest.raises(lw.ScheduleError, match=r"bind on stage 'D': axis 'k' is a reduction axis"):
        p.s[p.D].bind(p.k, lw.thread_axis("threadIdx.x"))


def test_stage_of_a_tensor_outside_the_schedule(p):
    other = lw.compute((4,), lambda i: lw.const(0.0), name="other")
    with pytest.raises(lw.ScheduleError, match=r"'other' is not part of this schedule; stages: A, B, C, D, E"):
        p.s[other]


def test_create_schedule_of_a_non_tensor():
    with pytest.raises(lw.ScheduleError, match=r"create_schedule takes a tensor or a list of tensors, got 3"):
        lw.create_schedule(3)
    with pytest.raises(lw.ScheduleError, match=r"create_schedule takes a tensor or a list of tensors, got \[\]"):
        lw.create_schedule([])


# ------------------------------------------------------------------ the schedule as a whole
# Where a stage is computed relative to the others is judged when the schedule is lowered, once
# every primitive has been applied (dsl/validate.py): the calls themselves are accepted.

def test_compute_at_a_stage_that_does_not_consume(p):
    di, = p.D.op.axis
    p.s[p.B].compute_at(p.s[p.D], di)
    with pytest.raises(lw.ScheduleError,
                       match=r"^compute_at on stage 'B': stage 'D' does not read 'B' \(it is read by 'C'\), and no "
                             r"stage that does is computed inside loop 'i' of 'D'\n  the call: "
                             r"s\[B\].compute_at\(s\[D\], i\)\n  fix: compute_at one of the stages that read it "
                             r"\('C'\).*compute it at root, or at one of C.i, C.j$"):
        lw.lower(p.s, [p.A, p.E])


def test_compute_at_with_two_consumers():
    A = lw.placeholder((8,), name="A")
    B = lw.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = lw.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = lw.compute((8,), lambda i: B[i] + C[i], name="D")
    s = lw.create_schedule(D)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'B': 'B' is also read by 'D', which is not "
                                               r"computed inside loop 'i' of 'C'; a stage computed there is not "
                                               r"visible to it\n  the call: s\[B\].compute_at\(s\[C\], i\)\n  fix: compute "
                                               r"those readers inside that loop too, or cache_read it once per "
                                               r"consumer, or compute it at root \(s\[B\].compute_root\(\)\)$"):
        lw.lower(s, [A, D])
    s[C].compute_at(s[D], D.op.axis[0])       # now both readers run inside D's loop: B may go there too
    s[B].compute_at(s[D], D.op.axis[0])
    lw.lower(s, [A, D])


def test_compute_inline_of_a_stage_that_hosts_others(p):
    p.s[p.B].compute_at(p.s[p.C], p.C.op.axis[0])
    p.s[p.C].compute_inline()
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'B': 'C' is inlined \(compute_inline\), so it "
                                               r"has no loop 'i' to compute 'B' in(.|\n)*fix: keep 'C' as a stage"):
        lw.lower(p.s, [p.A, p.E])


@pytest.mark.parametrize("primitive", ["split", "fuse"])
def test_host_axis_split_or_fused_after_compute_at(p, primitive):
    ci, cj = p.C.op.axis
    p.s[p.B].compute_at(p.s[p.C], ci)
    if primitive == "split":
        p.s[p.C].split(ci, factor=4)
        became = r"it was split into 'i.outer' and 'i.inner'"
    else:
        p.s[p.C].fuse(ci, cj)
        became = r"it was fused into 'i.j.fused'"
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'B': axis 'i' of 'C' is not a leaf axis when "
                                               rf"the schedule is lowered: {became}(.|\n)*fix: split or fuse first, "
                                               r"then compute_at one of the leaf axes of 'C'"):
        lw.lower(p.s, [p.A, p.E])


def test_compute_at_cycle(p):
    bi, bj = p.B.op.axis
    ci, cj = p.C.op.axis
    p.s[p.B].compute_at(p.s[p.C], ci)
    p.s[p.C].compute_at(p.s[p.B], bi)
    with pytest.raises(lw.ScheduleError, match=r"compute_at on stage 'B': 'C' is itself computed inside 'B'; that "
                                               r"would be a cycle\n  the call: s\[B\].compute_at\(s\[C\], i\)"):
        lw.lower(p.s, [p.A, p.E])


# ------------------------------------------------------------------ compute definitions

def test_indexing_with_wrong_number_of_indices(p):
    with pytest.raises(lw.ExprError, match=r"tensor 'A' has 2 dimensions but was indexed with 1 indices"):
        lw.compute((p.n,), lambda i: p.A[i], name="X")


def test_indexing_with_a_float_index(p):
    with pytest.raises(lw.DTypeError, match=r"index 1 of 'A' is the float 0.5; indices must be integers"):
        p.A[0, 0.5]


def test_reduce_axis_used_outside_a_reducer(p):
    X = lw.compute((p.n,), lambda i: p.A[i, p.k], name="X")   # forgot lw.sum
    with pytest.raises(lw.ExprError, match=r"compute 'X' uses the variable 'k', which is neither one of its axes "
                                           r"\(i\).*inside a reducer such as lw.sum\(\.\.\., axis=k\)"):
        lw.lower(lw.create_schedule(X), [p.A, X])


def test_reducer_over_a_spatial_axis(p):
    with pytest.raises(lw.ExprError, match=r"sum\(\.\.\., axis=\.\.\.\) needs reduce axes made by lw.reduce_axis"):
        lw.compute((p.n,), lambda i: lw.sum(p.A[i, i], axis=i), name="X")


def test_reduction_inside_an_expression(p):
    with pytest.raises(lw.ExprError, match=r"compute 'X': a reduction must be the whole body of a compute"):
        lw.compute((p.n,), lambda i: lw.sum(p.A[i, p.k], axis=p.k) * 2.0, name="X")


def test_reduce_axis_with_bad_domain():
    with pytest.raises(lw.ExprError, match=r"reduce_axis takes a \(min, max\) pair, got 8"):
        lw.reduce_axis(8, name="k")


def test_unknown_dtype():
    with pytest.raises(lw.DTypeError, match=r"unknown dtype 'floaty'; use one of float16, float32"):
        lw.placeholder((4,), name="A", dtype="floaty")
    with pytest.raises(lw.DTypeError, match=r"unsupported dtype 'complex128'"):
        lw.placeholder((4,), name="A", dtype="complex128")


def test_mixing_float_and_int(p):
    I = lw.placeholder((p.n,), name="I", dtype="int32")
    with pytest.raises(lw.DTypeError, match=r"'\*' mixes float32 and int32; add an explicit lw.cast"):
        lw.compute((p.n,), lambda i: p.A[i, i] * I[i], name="X")


def test_cast_with_topi_argument_order(p):
    """``topi.cast(x, dtype)`` order: the message shows both calls that work, not numpy's complaint."""
    k = lw.reduce_axis((0, p.n), name="k")
    with pytest.raises(lw.DTypeError, match=r"^lw.cast takes the dtype first: write lw.cast\('int32', A\[i, k\]\) "
                                            r"or A\[i, k\].astype\('int32'\), not lw.cast\(A\[i, k\], 'int32'\)$"):
        lw.compute((p.n,), lambda i: lw.sum(lw.cast(p.A[i, k], "int32"), axis=k), name="X")
    with pytest.raises(lw.DTypeError, match=r"write lw.cast\('float32', n \+ 1\) or \(n \+ 1\).astype\('float32'\)"):
        lw.cast(p.n + 1, "float32")
    with pytest.raises(lw.DTypeError, match=r"write lw.cast\('int8', 2.5\), not lw.cast\(2.5, 'int8'\)$"):
        lw.cast(2.5, "int8")


def test_dtype_that_is_an_expression():
    """An object with a ``.dtype`` numpy cannot read is an unknown dtype, not numpy's ValueError."""
    A = lw.placeholder((4,), name="A")
    with pytest.raises(lw.DTypeError, match=r"unknown dtype <TensorLoad A\[0\]>"):
        lw.placeholder((4,), name="B", dtype=A[0])


def test_compute_function_arity():
    with pytest.raises(lw.ExprError, match=r"compute 'X' has 2 dimensions; its function must take 2 index arguments"):
        lw.compute((2, 2), lambda i: lw.const(0.0), name="X")


def test_symbolic_condition_in_python_if(p):
    with pytest.raises(lw.ExprError, match=r"the symbolic expression n > 2 has no truth value"):
        lw.compute((p.n,), lambda i: p.A[i, i] if p.n > 2 else 0.0, name="X")


# ------------------------------------------------------------------ lower / build

def test_placeholder_missing_from_args(p):
    s = lw.create_schedule(p.C)
    with pytest.raises(lw.LoweringError, match=r"placeholder 'A' is read by the computation but is not in the "
                                               r"argument list; add it"):
        lw.build(s, [p.C])


def test_output_missing_from_args(p):
    s = lw.create_schedule(p.C)
    with pytest.raises(lw.LoweringError, match=r"the output 'C' of the schedule is not in the argument list"):
        lw.build(s, [p.A])


def test_lower_of_a_non_schedule(p):
    with pytest.raises(lw.LoweringError, match=r"lower takes a schedule from lw.create_schedule, got Tensor"):
        lw.lower(p.C, [p.A, p.C])


def test_build_for_unknown_target(p):
    with pytest.raises(lw.BuildError, match=r"unknown target 'tpu'; use 'llvm'"):
        lw.build(lw.create_schedule(p.C), [p.A, p.C], target="tpu")


def test_out_of_bounds_read(p):
    X = lw.compute((p.n,), lambda i: p.A[i, i + 1], name="X")
    with pytest.raises(lw.BoundsError, match=r"compute 'X' reads A\[i, i \+ 1\] outside the extent of 'A'.*"
                                             r"it reads index \d+ on dimension 1 of extent \d+"):
        lw.lower(lw.create_schedule(X), [p.A, X])


# ------------------------------------------------------------------ runtime arguments

def _read_only(a):
    a.flags.writeable = False
    return a


@pytest.fixture(scope="module")
def kernel():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 2.0, name="B")
    return lw.build(lw.create_schedule(B), [A, B], name="double")


@pytest.mark.parametrize("make_args, pattern", [
    (lambda: (np.ones(4, "float64"), np.empty(4, "float32")), r"argument 'A' must have dtype float32, got float64"),
    (lambda: (np.ones((4, 1), "float32"), np.empty(4, "float32")), r"argument 'A' must have 1 dimensions, got 2"),
    (lambda: (np.ones(4, "float32"), np.empty(5, "float32")), r"argument 'B' has shape \(5,\), but dimension 0 must be n = 4"),
    (lambda: (np.ones(8, "float32")[::2], np.empty(4, "float32")), r"argument 'A' must be C-contiguous"),
    (lambda: ([1.0, 2.0], np.empty(2, "float32")), r"argument 'A' must be a numpy.ndarray, got list"),
    (lambda: (np.ones(4, "float32"), _read_only(np.empty(4, "float32"))), r"argument 'B' is written by double but is read-only"),
    (lambda: (np.ones(4, "float32"),), r"double takes 2 arrays \(A, B\), got 1: missing argument\(s\) 'B'"),
    (lambda: (np.ones(4, "float32"),) * 3, r"double takes 2 arrays \(A, B\), got 3: 1 extra argument\(s\) after 'B'"),
], ids=["dtype", "rank", "shape", "contiguity", "list", "read-only", "too-few", "too-many"])
def test_runtime_argument_errors(kernel, make_args, pattern):
    with pytest.raises(lw.ArgumentError, match=pattern):
        kernel(*make_args())


def test_every_user_error_is_a_loopweave_error():
    for cls in (lw.DTypeError, lw.ExprError, lw.ScheduleError, lw.LoweringError, lw.BoundsError, lw.ArgumentError,
                lw.BuildError):
        assert issubclass(cls, lw.LoopweaveError)
    assert not issubclass(lw.InternalError, lw.LoopweaveError)
    assert "This is a bug in loopweave" in str(lw.InternalError("x"))


# ------------------------------------------------------------------ run-time index checks

def _indexed_read():
    A = lw.placeholder((5,), name="A")
    idx = lw.placeholder((3,), name="idx", dtype="int64")
    C = lw.compute((3,), lambda i: A[idx[i]], name="C")
    return lw.create_schedule(C), [A, idx, C]


def test_data_dependent_index_out_of_range_with_checks_bounds():
    s, args = _indexed_read()
    f = lw.build(s, args, checks="bounds", name="pick")
    with pytest.raises(lw.ArgumentError, match=r"pick: index 5 is out of range for dimension 0 of 'A' \(read as "
                                               r"A\[idx\[i\]\] in 'pick'\), of size 5 \(valid: 0 to 4\)"
                                               r"(.|\n)*fix: pass indices inside the range"):
        f(np.zeros(5, "float32"), np.array([0, 5, 1]), np.zeros(3, "float32"))


def test_unknown_kind_of_checks():
    s, args = _indexed_read()
    with pytest.raises(lw.BuildError, match=r"checks='everything' is not a kind of run-time check; use checks=None "
                                            r"\(the default.*\) or checks='bounds'"):
        lw.build(s, args, checks="everything")
