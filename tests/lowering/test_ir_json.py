"""lowering/ir_json.py: a lowered function written as JSON and read back is the same function; any
other text is a ValueError and builds nothing."""
import json

import numpy as np
import pytest

import loopweave as lw
from loopweave.lowering.ir_json import primfunc_from_json, primfunc_to_json


def _matmul(target):
    n = lw.var("n")
    A = lw.placeholder((n, 64), name="A")
    B = lw.placeholder((64, 32), name="B")
    k = lw.reduce_axis((0, 64), name="k")
    C = lw.compute((n, 32), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = lw.compute((n, 32), lambda i, j: lw.if_then_else(C[i, j] > 0.5, C[i, j], C[i, j] * 0.1), name="D")
    s = lw.create_schedule(D)
    if target == "cuda":
        i, j = D.op.axis
        s[D].bind(i, lw.thread_axis("blockIdx.x"))
        s[D].bind(j, lw.thread_axis("threadIdx.x"))
        s[C].compute_at(s[D], j)
    else:
        s[C].compute_at(s[D], D.op.axis[0])
        jo, ji = s[D].split(D.op.axis[1], factor=8)
        s[D].vectorize(ji)
    return lw.lower(s, [A, B, D], target=target), [A, B, D]


@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_round_trip_is_the_same_function(target):
    func, _ = _matmul(target)
    text = primfunc_to_json(func)
    again = primfunc_from_json(text)
    assert again.structural_key() == func.structural_key()
    assert [b.name for b in again.params] == [b.name for b in func.params]
    assert primfunc_to_json(again) == text


def test_round_trip_builds_and_runs():
    func, _ = _matmul("llvm")
    f = lw.build(primfunc_from_json(primfunc_to_json(func)), (), "llvm")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
    d = np.empty((5, 32), np.float32)
    f(a, b, d)
    c = a @ b
    np.testing.assert_allclose(d, np.where(c > 0.5, c, c * 0.1), rtol=1e-5, atol=1e-5)


def test_other_text_is_refused():
    func, _ = _matmul("llvm")
    doc = json.loads(primfunc_to_json(func))
    bad = [
        "not json", "[]", json.dumps(dict(doc, format="pickle")),
        json.dumps(dict(doc, body={"node": "Popen", "fields": []})),
        json.dumps(dict(doc, body={"node": "Seq", "fields": [{"tuple": []}, 1]})),
        json.dumps(dict(doc, params=[99])),
        json.dumps(dict(doc, size_vars=[True])),
        json.dumps(dict(doc, vars=[[1, "int64"]])),
        json.dumps(dict(doc, body={"var": -1})),
    ]
    for text in bad:
        with pytest.raises(ValueError):
            primfunc_from_json(text)
