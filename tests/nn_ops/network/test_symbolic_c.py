"""Sizes written as C (``network/symbolic_c.py``) give what ``symbolic.evaluate`` gives, and say
when they overflow instead of wrapping."""
import os
import shutil
import subprocess

import pytest
import sympy

from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.symbolic_c import C_RATIONALS, c_condition, c_size

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc) to compile the generated C")

a, b = S.symbol("a"), S.symbol("b")
SIZES = [a * b * 4, S.floordiv(a - 7, 3) + 1, S.ceildiv(2 * a + 1, 4), S.remainder(a - 9, 4),
         sympy.Max(a * 3, b + 5) - sympy.Min(a, 2 * b), S.divisible_not_by(b, 8, 7), (a + b) ** 2,
         S.floordiv(a * b, 6) * 6 + sympy.Rational(1, 2) * (2 * b)]
CONDITIONS = [sympy.Eq(a, b), sympy.Or(sympy.Eq(a, 1), sympy.Eq(b, 1)), sympy.Ge(a, 3) & sympy.Lt(b, 10),
              sympy.Le(S.floordiv(a, 2), b)]
BINDINGS = [(1, 1), (3, 10), (7, 2), (12, 12), (64, 9)]


def test_sizes_and_conditions_in_c_equal_symbolic_evaluate(tmp_path):
    symbols = ["a", "b"]
    lines = [f'    printf("%lld\\n", (long long)lwq_whole({c_size(e, symbols)}));' for e in SIZES]
    lines += [f'    printf("%d\\n", {c_condition(c, symbols)});' for c in CONDITIONS]
    source = ("#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n" + C_RATIONALS +
              "int main(int argc, char **argv) {\n    int64_t s[2] = {atoll(argv[1]), atoll(argv[2])};\n"
              + "\n".join(lines) + '\n    printf("%d\\n", lwq_overflow);\n    return 0;\n}\n')
    (tmp_path / "sizes.c").write_text(source)
    subprocess.run([CC, "-O1", "-o", str(tmp_path / "sizes"), str(tmp_path / "sizes.c")], check=True,
                   capture_output=True, text=True)
    for va, vb in BINDINGS:
        out = subprocess.run([str(tmp_path / "sizes"), str(va), str(vb)], capture_output=True, text=True,
                             check=True).stdout.split()
        binding = {"a": va, "b": vb}
        want = [int(S.evaluate(e, binding)) for e in SIZES] + [int(bool(S.evaluate(c, binding))) for c in CONDITIONS]
        assert [int(v) for v in out] == want + [0], (va, vb)
    big = subprocess.run([str(tmp_path / "sizes"), str(2 ** 40), str(2 ** 40)], capture_output=True, text=True,
                         check=True).stdout.split()
    assert big[-1] == "1"          # (a + b) ** 2 and a * b * 4 overflow int64: said, not wrapped
