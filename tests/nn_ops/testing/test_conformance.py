"""ONNX backend node tests (from the ``onnx`` package) for every op the importer converts.

Every case made only of claimed ops (ops with a converter, plus Constant/Shape/Size) is
imported, compiled and run by ``conformance.run_case`` with every input fed at run time
as the case gives it: data inputs (Gather indices, Where conditions, integer operands)
and shape-like inputs (a Reshape's shape, a Slice's starts, a Resize's scales, ...),
which make the model a DynamicGraph specialised to their values.  Outputs must match the
reference (dtype and shape exactly, values within the case's tolerances).  Cases that use
something loopweave rejects on purpose must raise ``OnnxImportError`` naming the node, op
and opset (never a crash): ``EXPECTED_UNSUPPORTED`` lists them by reason.
"""
import re

import pytest

onnx = pytest.importorskip("onnx")

from loopweave.nn_ops.testing.conformance import collect_cases, is_claimed, run_case  # noqa: E402

EXPECTED_UNSUPPORTED = {
    "element types loopweave has no dtype for (float8, bfloat16, 4-/2-bit, string)": [
        r"test_.*(?i:float8|e4m3|e5m2|int4|int2|float4e2m1|e8m0|bfloat16|_bf16|string).*",
    ],
    "random dropout (training mode, nonzero ratio)": [r"test_training_dropout(_default)?(_mask)?"],
    "sequences and optionals": [r"test_identity_(sequence|opt)"],
    "3-d ConvTranspose (1-d and 2-d are converted)": [r"test_convtranspose_3d"],
}
_PATTERNS = [re.compile(p) for patterns in EXPECTED_UNSUPPORTED.values() for p in patterns]


def expected_unsupported(name: str) -> bool:
    return any(p.fullmatch(name) for p in _PATTERNS)


_CASES = [c for c in collect_cases() if is_claimed(c)]


@pytest.mark.parametrize("case", _CASES, ids=[c.name for c in _CASES])
def test_onnx_backend_node_case(case):
    status, detail = run_case(case)
    if expected_unsupported(case.name):
        assert status == "unsupported", f"{case.name} is listed as unsupported but is {status}: {detail}"
        assert re.search(r"\(opset \d+\)|^(in|out)put '", detail), detail   # names the node and op, or the value
    else:
        assert status == "pass", detail


def test_every_expected_unsupported_pattern_is_used():
    """A reason whose cases all pass now must leave the list (it would hide regressions otherwise)."""
    names = [c.name for c in _CASES]
    unused = [p.pattern for p in _PATTERNS if not any(p.fullmatch(n) for n in names)]
    assert not unused, unused
