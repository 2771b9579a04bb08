"""Einsum as one compute: output axes from the output subscripts, a reduce axis for every
other letter, the body the product of the operands' elements.

Handles transposes, diagonals (a repeated letter), sums, batched products, the ellipsis
(``...``, broadcast like numpy) and implicit output subscripts.  The stage is tagged
``"reduce"`` (parallel over the output, serial over the summed letters) or ``"injective"``
when nothing is summed.  Contractions that are matrix products are better served by the
matmul op; this is the general case.
"""
from __future__ import annotations

import math
from typing import Dict, List, Sequence, Tuple

from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents

_ELLIPSIS_LETTERS = "0123456789"


def parse(equation: str, ranks: Sequence[int]) -> Tuple[List[str], str]:
    """Input and output subscripts with each ``...`` spelled out as digit letters."""
    eq = equation.replace(" ", "")
    lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
    subs = lhs.split(",")
    if len(subs) != len(ranks):
        raise ExprError(f"einsum {equation!r} names {len(subs)} operands, got {len(ranks)}")
    ell = 0
    spelled = []
    for sub, rank in zip(subs, ranks):
        if "..." in sub:
            n = rank - (len(sub) - 3)
            if n < 0:
                raise ExprError(f"einsum subscripts {sub!r} for an operand of rank {rank}")
            ell = max(ell, n)
            sub = sub.replace("...", _ELLIPSIS_LETTERS[10 - n:] if n else "")
        if len(sub) != rank or not all(c.isalpha() or c.isdigit() for c in sub):
            raise ExprError(f"einsum subscripts {sub!r} for an operand of rank {rank}")
        spelled.append(sub)
    ell_letters = _ELLIPSIS_LETTERS[10 - ell:] if ell else ""
    if rhs is None:
        letters = "".join(spelled)
        rhs = ell_letters + "".join(sorted(c for c in set(letters) if c.isalpha() and letters.count(c) == 1))
    else:
        rhs = rhs.replace("...", ell_letters)
    if len(set(rhs)) != len(rhs) or any(c not in "".join(spelled) for c in rhs):
        raise ExprError(f"einsum output subscripts {rhs!r} of {equation!r}")
    return spelled, rhs


def _one(d) -> bool:
    return isinstance(d, int) and d == 1


def einsum(equation: str, tensors: Sequence[Tensor], name: str = "einsum") -> Tensor:
    """Sizes may be symbolic (shape-polymorphic kernels): a letter's sizes other than 1 must then be
    one expression (the caller proved them equal and gave them one size var)."""
    shapes = [extents(t) for t in tensors]
    subs, out = parse(equation, [len(s) for s in shapes])
    if len({t.dtype for t in tensors}) != 1:
        raise ExprError(f"einsum of mixed dtypes {[t.dtype for t in tensors]}")
    size: Dict[str, object] = {}
    for sub, shape in zip(subs, shapes):
        for c, d in zip(sub, shape):
            known = size.get(c, 1)
            if _one(d) or known is d or (isinstance(known, int) and isinstance(d, int) and known == d):
                size.setdefault(c, d)
            elif _one(known):
                size[c] = d
            else:
                raise ExprError(f"einsum letter {c!r} has sizes {known} and {d}")
    summed = [c for c in dict.fromkeys("".join(subs)) if c not in out]
    raxes = {c: reduce_axis((0, size[c]), name=f"r_{c}") for c in summed}

    def body(*idx):
        env = dict(zip(out, idx))
        env.update(raxes)
        value = None
        for t, sub, shape in zip(tensors, subs, shapes):
            load = t[tuple(0 if _one(d) and not _one(size[c]) else env[c] for c, d in zip(sub, shape))]
            value = load if value is None else value * load
        return lw_sum(value, axis=[raxes[c] for c in summed]) if summed else value

    shape = tuple(size[c] for c in out)
    if all(isinstance(d, int) for d in shape) and math.prod(shape) == 0:
        raise ExprError("einsum with an empty result")
    return compute(shape, body, name=name, tag="reduce" if summed else "injective")
