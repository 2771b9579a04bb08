"""Conformance with the ONNX backend node test cases: run one case, or count the whole suite.

``python -m loopweave.nn_ops.testing.conformance`` runs every case of
``onnx.backend.test.case.node.collect_testcases()`` and prints how many pass, are
rejected cleanly (``OnnxImportError``: unsupported), give a wrong answer (fail) or raise
anything else (crash), over the whole suite and over the cases made only of ops loopweave
claims.  ``tests/nn_ops/test_ops_onnx_backend.py`` runs the claimed cases with
:func:`run_case`.

Every input is fed at run time, as the case gives it: shape-like inputs (a Reshape's
shape, a Slice's starts, a Resize's scales, ...) make the model a DynamicGraph,
specialised to their values when it runs.

``--onnxruntime`` also runs every case through onnxruntime (CPU provider) with the same
comparison, so the two pass counts are over the same cases and the same tolerances.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from typing import Tuple

import numpy as np

from ...errors import OnnxImportError

def collect_cases():
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases()


def claimed_ops() -> set:
    """ONNX op types loopweave converts (or evaluates at import)."""
    from ..onnx_import.context import CONVERTERS
    return set(CONVERTERS) | {"Constant", "Shape", "Size"}


def is_claimed(case) -> bool:
    ops = {n.op_type for n in case.model.graph.node}
    return bool(ops) and ops <= claimed_ops()


def as_array(value):
    """Case data as numpy: some cases hold numpy scalars or TensorProtos (float16, bfloat16, ...)."""
    import onnx
    from onnx import numpy_helper
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, np.generic) else value


def _matches(got, want, rtol, atol) -> Tuple[bool, str]:
    want = np.asarray(as_array(want))
    if got.shape != want.shape:
        return False, f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return False, f"dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.kind in "biu":
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} of {got.size} elements differ"
    # at least rtol 1e-4 / atol 1e-5; float16 (an ulp is ~1e-3) at least 1e-3 / 1e-3
    low, floor = (1e-3, 1e-3) if got.dtype == np.float16 else (1e-4, 1e-5)
    ok = np.allclose(got, want, rtol=max(rtol, low), atol=max(atol, floor), equal_nan=True)
    with np.errstate(invalid="ignore"):     # inf - inf in the report only
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    nan_mismatch = int(np.count_nonzero(np.isnan(got) != np.isnan(want)))
    worst = float(np.nanmax(diff)) if diff.size and not np.isnan(diff).all() else 0.0
    return ok, f"max abs diff {worst:g}, {nan_mismatch} NaN(s) misplaced"


def run_case(case) -> Tuple[str, str]:
    """(status, detail): 'pass', 'unsupported' (clean OnnxImportError) or 'fail'; other errors propagate.

    Inputs are fed at run time as the case gives them, shape-like ones (a Reshape's shape,
    a Resize's sizes...) included: ``from_onnx`` then returns a DynamicGraph, compiled per
    value."""
    import loopweave as lw
    if not case.data_sets:
        return "unsupported", "the case has no data sets"
    try:
        g = lw.from_onnx(case.model)
        exe = lw.compile(g, progress=False)
        names = [i if isinstance(i, str) else i[0] for i in g.inputs]   # names, or (name, shape, dtype)
        for inputs, outputs in case.data_sets:
            feeds = [as_array(a) for a in inputs]
            got = exe.run({name: arr for name, arr in zip(names, feeds)})
            if len(got) != len(outputs):
                return "fail", f"{len(got)} outputs, expected {len(outputs)}"
            for k, (a, b) in enumerate(zip(got, outputs)):
                ok, detail = _matches(a, b, case.rtol, case.atol)
                if not ok:
                    return "fail", f"output {k}: {detail}"
    except OnnxImportError as exc:      # at import, or while specialising to the inputs' values
        return "unsupported", str(exc).splitlines()[-1].strip()
    return "pass", ""


def run_case_onnxruntime(case) -> Tuple[str, str]:
    """(status, detail) of ``case`` on onnxruntime: 'pass', 'fail', or 'unsupported' when the
    session cannot be created or run (onnxruntime's equivalent of a clean rejection)."""
    import onnxruntime as ort
    if not case.data_sets:
        return "unsupported", "the case has no data sets"
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        sess = ort.InferenceSession(case.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        for inputs, outputs in case.data_sets:
            got = sess.run(None, {n: as_array(a) for n, a in zip(names, inputs)})
            if len(got) != len(outputs):
                return "fail", f"{len(got)} outputs, expected {len(outputs)}"
            for k, (a, b) in enumerate(zip(got, outputs)):
                ok, detail = _matches(np.asarray(a), b, case.rtol, case.atol)
                if not ok:
                    return "fail", f"output {k}: {detail}"
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        return "unsupported", f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return "pass", ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("-v", action="store_true", help="print every case that does not pass")
    parser.add_argument("--onnxruntime", action="store_true", help="count onnxruntime's passes on the same cases")
    args = parser.parse_args(argv)
    cases = [c for c in collect_cases() if args.k in c.name]
    counts = {"all": Counter(), "claimed": Counter()}
    peer = {"all": Counter(), "claimed": Counter()}        # onnxruntime's statuses (--onnxruntime)
    t0 = time.perf_counter()
    for case in cases:
        try:
            status, detail = run_case(case)
        except Exception as exc:  # noqa: BLE001 - a report: anything else is a crash to fix
            status, detail = "crash", f"{type(exc).__name__}: {exc}"
        claimed = is_claimed(case)
        counts["all"][status] += 1
        if claimed:
            counts["claimed"][status] += 1
        if args.onnxruntime:
            peer_status, _ = run_case_onnxruntime(case)
            peer["all"][peer_status] += 1
            if claimed:
                peer["claimed"][peer_status] += 1
        if status in ("fail", "crash") or (args.v and status != "pass"):
            print(f"{case.name:<60} {status:<11} {'claimed ' if claimed else ''}{detail[:200]}", flush=True)
    for key, label in (("all", "whole suite"), ("claimed", "cases of claimed ops only")):
        c = counts[key]
        total = sum(c.values())
        print(f"{label}: {total} cases: {c['pass']} pass, {c['unsupported']} unsupported (clean OnnxImportError), "
              f"{c['fail']} fail, {c['crash']} crash")
        if args.onnxruntime:
            o = peer[key]
            print(f"  onnxruntime on the same cases: {o['pass']} pass, {o['unsupported']} unsupported "
                  f"(session or run raised), {o['fail']} fail")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0 if counts["all"]["fail"] + counts["all"]["crash"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
