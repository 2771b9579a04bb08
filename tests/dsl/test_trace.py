"""The schedule trace (loopweave.dsl.trace): printed as code, JSON round-trip, replay."""
import json

import pytest

import loopweave as lw


def _definition():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = lw.compute((n, n), lambda i, j: C[i, j] + 1.0, name="D")
    return A, B, C, D


def _schedule(A, B, C, D):
    s = lw.create_schedule(D)
    s.cache_read(A, "local", [C])
    CL = s.cache_write(C, "local")
    i, j = D.op.axis
    io, jo, ii, ji = s[D].tile(i, j, 8, 8)
    s[D].vectorize(ji)
    s[D].parallel(io)
    s[D].pragma(io, "auto_unroll_max_step", 16)
    s[C].compute_at(s[D], jo)
    ci, cj, ck = s[CL].leaf_iter_vars
    ko, ki = s[CL].split(ck, factor=4)
    s[CL].reorder(ko, ci, ki, cj)
    s[CL].unroll(ki)
    return s


def _lowered(s, A, B, D):
    return str(lw.lower(s, [A, B, D]))


def test_trace_records_every_primitive():
    t = _definition()
    s = _schedule(*t)
    prims = [st.primitive for st in s.trace]
    assert prims == ["cache_read", "cache_write", "split", "split", "reorder", "vectorize", "parallel",
                     "pragma", "compute_at", "split", "reorder", "unroll"]
    assert len(s.trace) == 12
    assert repr(s.trace) == "Trace(12 steps)"


def test_str_trace_is_code():
    t = _definition()
    s = _schedule(*t)
    code = str(s.trace)
    assert "A_local = s.cache_read(A, 'local', [C])" in code
    assert "C_local = s.cache_write(C, 'local')" in code
    assert "i_outer, i_inner = s[D].split(i, factor=8)" in code
    assert "s[D].vectorize(j_inner)" in code
    assert "s[C].compute_at(s[D], j_outer)" in code
    compile(code, "<trace>", "exec")


def test_exec_of_printed_trace_reproduces_the_schedule():
    A, B, C, D = t = _definition()
    s = _schedule(*t)
    A2, B2, C2, D2 = _definition()
    s2 = lw.create_schedule(D2)
    exec(str(s.trace), {"lw": lw, "s": s2, "A": A2, "B": B2, "C": C2, "D": D2})
    assert _lowered(s2, A2, B2, D2) == _lowered(s, A, B, D)


def test_json_round_trip_and_replay_gives_identical_ir():
    A, B, C, D = t = _definition()
    s = _schedule(*t)
    text = s.trace.to_json()
    data = json.loads(text)
    assert data["version"] == 1 and len(data["steps"]) == 12
    restored = lw.Trace.from_json(text)
    assert restored.to_json() == text
    assert str(restored) == str(s.trace)
    A2, B2, C2, D2 = _definition()
    s2 = lw.create_schedule(D2)
    restored.apply(s2)
    assert _lowered(s2, A2, B2, D2) == _lowered(s, A, B, D)
    assert s2.trace.to_json() == text


def test_replay_of_rfactor_inline_and_symbolic_split():
    def definition():
        n = lw.var("n")
        m = lw.var("m")
        X = lw.placeholder((m, n), name="X")
        Y = lw.compute((m, n), lambda i, j: X[i, j] * 2.0, name="Y")
        k = lw.reduce_axis((0, n), name="k")
        Z = lw.compute((m,), lambda i: lw.sum(Y[i, k], axis=k), name="Z")
        return X, Y, Z, m

    X, Y, Z, m = definition()
    s = lw.create_schedule(Z)
    s[Y].compute_inline()
    ko, ki = s[Z].split(s[Z].op.reduce_axis[0], factor=8)
    ZF = s.rfactor(Z, ki)
    s[ZF].vectorize(s[ZF].op.axis[0])
    io, ii = s[Z].split(s[Z].op.axis[0], factor=m)
    X2, Y2, Z2, m2 = definition()
    s2 = lw.create_schedule(Z2)
    lw.Trace.from_json(s.trace.to_json()).apply(s2)
    assert str(lw.lower(s2, [X2, Z2])) == str(lw.lower(s, [X, Z]))
    assert "factor=m" in str(s.trace)


def test_replay_errors_name_the_step():
    A, B, C, D = _definition()
    s = lw.create_schedule(D)
    s[D].split(D.op.axis[0], factor=4)
    bad = json.loads(s.trace.to_json())
    bad["steps"][0]["args"]["parent"] = "nope"
    A2, B2, C2, D2 = _definition()
    with pytest.raises(lw.ScheduleError, match="replaying step 'split' on stage 'D' failed: stage 'D' has no axis named 'nope'"):
        lw.Trace.from_json(json.dumps(bad)).apply(lw.create_schedule(D2))


def test_unknown_trace_version():
    with pytest.raises(lw.ScheduleError, match="trace version 99 is not supported"):
        lw.Trace.from_json(json.dumps({"version": 99, "steps": []}))


def test_schedule_str_lists_the_primitives():
    t = _definition()
    s = _schedule(*t)
    text = str(s)
    assert "# primitives applied:" in text
    assert "# s[D].parallel(i_outer)" in text


def test_printed_trace_rebinds_an_axis_name_shared_by_two_stages():
    def definition():
        A = lw.placeholder((16, 32), name="A")
        B = lw.compute((16, 32), lambda i, j: A[i, j] * 2, name="B")
        C = lw.compute((16, 32), lambda i, j: B[i, j] + 1, name="C")
        return A, B, C

    A, B, C = definition()
    s = lw.create_schedule(C)
    s[B].unroll(s[B].op.axis[1])       # binds identifier 'j' to B's axis
    s[C].parallel(s[C].op.axis[1])     # 'j' now holds C's axis
    s[B].reorder(s[B].op.axis[1], s[B].op.axis[0])   # B's 'j' again: the printed code must rebind it
    code = str(s.trace)
    assert code.count("j = s[B]") == 2
    A2, B2, C2 = definition()
    s2 = lw.create_schedule(C2)
    exec(code, {"lw": lw, "s": s2, "A": A2, "B": B2, "C": C2})
    assert str(lw.lower(s2, [A2, C2])) == str(lw.lower(s, [A, C]))


def test_reorder_storage_is_printed_and_replayed():
    A, B, C, D = t = _definition()
    s = _schedule(*t)
    AL = s.stage_by_name("A.local")
    AL.reorder_storage(*reversed(AL.op.axis))
    assert "s[A_local].reorder_storage(ax1, ax0)" in str(s.trace)
    A2, B2, C2, D2 = _definition()
    s2 = lw.create_schedule(D2)
    lw.Trace.from_json(s.trace.to_json()).apply(s2)
    assert s2.stage_by_name("A.local").storage_order == (1, 0)
    assert _lowered(s2, A2, B2, D2) == _lowered(s, A, B, D)
