"""Rich (HTML) display and the stable text forms of tensors, schedules, lowered IR and modules."""
from __future__ import annotations

import html as htmllib
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave.backends.module_html import module_html
from loopweave.dsl.html_markup import highlight_code
from loopweave.dsl.printer import tensor_definition


def _text(markup: str) -> str:
    """What a reader sees: tags dropped, entities decoded."""
    return htmllib.unescape(re.sub(r"<[^>]+>", "", markup))


def _matmul():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A", dtype="float32")
    B = lw.placeholder((n, n), name="B", dtype="float32")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def _scheduled_matmul():
    A, B, C, k = _matmul()
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ki, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, (A, B, C)


def _stencil():
    n = lw.var("n")
    X = lw.placeholder((n, n), name="X", dtype="float32")
    BX = lw.compute((n, n - 2), lambda i, j: (X[i, j] + X[i, j + 1] + X[i, j + 2]) / 3.0, name="BX")
    Y = lw.compute((n - 2, n - 2), lambda i, j: (BX[i, j] + BX[i + 1, j] + BX[i + 2, j]) / 3.0, name="Y")
    s = lw.create_schedule(Y)
    io, jo, ii, ji = s[Y].tile(*Y.op.axis, 32, 32)
    s[BX].compute_at(s[Y], jo)
    s[Y].vectorize(ji)
    s[Y].parallel(io)
    return s, (X, BX, Y)


# ------------------------------------------------------------------------------- tensors
def test_tensor_definition_text_is_math():
    A, B, C, _ = _matmul()
    assert tensor_definition(C) == "C[i, j] = Σ_{k∈[0, n)} A[i, k]·B[k, j]"
    assert tensor_definition(A) == "A : float32[n, n]  (input)"


def test_tensor_definition_other_reducers_and_conditions():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    M = lw.compute((n,), lambda i: lw.max(A[i, k], axis=k), name="M")
    S = lw.compute((n,), lambda i: lw.sum(A[i, k], axis=k, where=k < i), name="S")
    E = lw.compute((n, n), lambda i, j: lw.exp(A[i, j]) * 2.0, name="E")
    assert tensor_definition(M) == "M[i] = max_{k∈[0, n)} A[i, k]"
    assert tensor_definition(S) == "S[i] = Σ_{k∈[0, n)} A[i, k]  if k < i"
    assert tensor_definition(E) == "E[i, j] = exp(A[i, j])·2.0"
    markup = S._repr_html_()
    assert "&lt;" in markup and "k < i" not in markup          # escaped
    assert "if k < i" in _text(markup)


def test_tensor_repr_html_renders_sum_with_subscript_range():
    A, B, C, _ = _matmul()
    markup = C._repr_html_()
    assert "Σ" in markup
    assert "<sub>k∈[0, n)</sub>" in markup
    assert "A[i, k]·B[k, j]" in markup
    assert "C[i, j] =" in markup
    assert "float32[n, n]" in markup
    assert "input" in _text(A._repr_html_())


# ------------------------------------------------------------------------------- schedules
MATMUL_SCHEDULE_TEXT = """\
A: input float32[n, n]
B: input float32[n, n]
C  (at root, scope global)
  for i.outer in range((n + 31) // 32)  # parallel
    for j.outer in range((n + 31) // 32)
      for k.outer in range((n + 3) // 4)
        for k.inner in range(4)
          for i.inner in range(32)
            for j.inner in range(32)  # vectorized

# primitives applied:
# i = s[C].axis_by_name('i')
# i_outer, i_inner = s[C].split(i, factor=32)
# j = s[C].axis_by_name('j')
# j_outer, j_inner = s[C].split(j, factor=32)
# s[C].reorder(i_outer, j_outer, i_inner, j_inner)
# k = s[C].axis_by_name('k')
# k_outer, k_inner = s[C].split(k, factor=4)
# s[C].reorder(i_outer, j_outer, k_outer, k_inner, i_inner, j_inner)
# s[C].vectorize(j_inner)
# s[C].parallel(i_outer)"""


def test_schedule_text_form_is_stable():
    s, _ = _scheduled_matmul()
    assert str(s) == MATMUL_SCHEDULE_TEXT


def test_default_schedule_text_has_no_primitives_section():
    _, _, C, _ = _matmul()
    text = str(lw.create_schedule(C))
    assert text.splitlines()[2:] == ["C  (at root, scope global)", "  for i in range(n)", "    for j in range(n)",
                                     "      for k in range(n)"]
    assert "primitives" not in text


def test_schedule_repr_html_is_a_table_of_loops_with_annotations_and_trace():
    s, _ = _scheduled_matmul()
    markup = s._repr_html_()
    seen = _text(markup)
    assert "<table" in markup and markup.count("<tr>") >= 7
    for name, extent in (("i.outer", "(n + 31) // 32"), ("k.outer", "(n + 3) // 4"), ("j.inner", "32")):
        assert name in seen and extent in seen
    assert "parallel" in seen and "vectorized" in seen
    assert "spatial" in seen and "reduce" in seen
    assert "inputs: A: float32[n, n], B: float32[n, n]" in seen
    assert "<details" in markup and "primitives applied (10 lines)" in seen
    for line in s.trace.code_lines():
        assert line in seen


def test_attach_points_are_shown():
    s, (X, BX, Y) = _stencil()
    text = str(s)
    assert "BX  (computed at Y.j.outer, scope global)" in text
    assert "for j.outer in range((n - 2 + 31) // 32)  <- computes BX here" in text
    seen = _text(s._repr_html_())
    assert "← computes BX here" in seen
    assert "computed at Y.j.outer" in seen


def test_stage_repr_html_shows_its_loops_and_only_its_primitives():
    s, (X, BX, Y) = _stencil()
    seen = _text(s[Y]._repr_html_())
    assert "stage Y" in seen and "i.outer" in seen and "parallel" in seen
    assert "compute_at" not in seen                      # that step belongs to BX
    assert "s[Y].vectorize(j_inner)" in seen
    bx = _text(s[BX]._repr_html_())
    assert "s[BX].compute_at(s[Y], j_outer)" in bx
    assert "input" in _text(s[X]._repr_html_())


def test_unroll_bind_pragma_and_inline_annotations():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    T = lw.compute((n,), lambda i: A[i] * 2.0, name="T")
    U = lw.compute((n,), lambda i: T[i] + 1.0, name="U")
    s = lw.create_schedule(U)
    s[T].compute_inline()
    o, i = s[U].split(U.op.axis[0], factor=4)
    s[U].unroll(i)
    s[U].pragma(o, "auto_unroll_max_step", 16)
    text = str(s)
    assert "T  (inlined, scope global)" in text
    assert "for i.inner in range(4)  # unrolled" in text
    assert "# pragma auto_unroll_max_step=16" in text
    seen = _text(s._repr_html_())
    assert "unrolled" in seen and "pragma auto_unroll_max_step=16" in seen and "inlined" in seen

    s2 = lw.create_schedule(U)
    bo, bi = s2[U].split(U.op.axis[0], factor=64)
    s2[U].bind(bo, lw.thread_axis("blockIdx.x"))
    s2[U].bind(bi, lw.thread_axis("threadIdx.x"))
    assert "# bound to blockIdx.x" in str(s2)
    assert "bound to threadIdx.x" in _text(s2._repr_html_())


# ------------------------------------------------------------------------------- lowered IR
def test_primfunc_repr_html_is_the_text_form_highlighted():
    s, args = _scheduled_matmul()
    func = lw.lower(s, list(args))
    text = str(func)
    assert text.startswith("def main(A: float32[n, n], B: float32[n, n], C: float32[n, n]):\n")
    assert "  # parallel" in text
    markup = func._repr_html_()
    assert "<pre" in markup and "<span" in markup
    assert "< n" not in markup and "&lt; n" in markup          # conditions are escaped
    body = markup[markup.index("<pre"):]
    assert _text(body) == text                               # highlighting adds markup, never text
    assert "parallel" in _text(markup[:markup.index("<pre")])  # loop summary


@pytest.mark.parametrize("code", [
    "def f(x):\n    for i in range(n):  # parallel\n        if i < n and not x:\n            y[i] = 'a<b' + 1.5e-3",
    "a & b <c> \"q\" # <tag> & more",
    "x32(ramp(i.outer * 8, 1, 8))",
])
def test_highlighting_round_trips_the_text(code):
    assert _text(highlight_code(code)) == code
    assert "<tag>" not in highlight_code(code)


# ------------------------------------------------------------------------------- modules
def test_module_repr_html_has_signature_and_collapsed_sources():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = lw.create_schedule(B)
    f = lw.build(s, [A, B])
    a = np.arange(8, dtype="float32")
    b = np.empty_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, a + 1)
    markup = f._repr_html_()
    seen = _text(markup)
    assert "main(A: float32[n], B: float32[n] (out))" in seen
    assert markup.count("<details>") == 3 and "<details open" not in markup
    for title in ("lowered IR", "LLVM IR", "assembly"):
        assert f"<summary>{title} (" in markup
    assert f.get_source("lowered") in seen
    assert "define" in seen                                    # LLVM IR
    assert f.symbol in seen.split("assembly (", 1)[1]          # the assembly names the kernel


def test_module_repr_html_survives_a_failing_source():
    class Fake:
        name, params, target = "k", [], "llvm"

        def get_source(self, fmt):
            if fmt == "asm":
                raise RuntimeError("no assembler")
            return "x < y"

    markup = module_html(Fake())
    assert "RuntimeError: no assembler" in _text(markup)
    assert "x &lt; y" in markup
