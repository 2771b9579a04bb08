"""Exact bound inference with isl.

``required_region`` answers: with the loops around an attach point fixed, which
elements of a producer does the consumer read in the loops inside it?  The answer
is the image of the consumer's remaining iteration domain (tails excluded by their
guards) under its affine access maps, cut to the producer's shape; its per-dimension
min and max are piecewise affine in the outer loop variables and the symbolic sizes.
The buffer for one attach instance is sized by the maximum extent over all outer
iterations, so nothing is over-allocated.  Non-affine indices or conditions fall
back, explicitly, to the producer's full extent in that dimension.

``check_accesses_in_bounds`` uses the same machinery on each operation's own
definition to reject reads that can fall outside a tensor before any code exists.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import islpy as isl

from ..dsl.arith import simplify_expr
from ..dsl.expr import Const, Expr, Var, const, select
from ..dsl.expr_printer import expr_to_str
from ..dsl.visitor import substitute
from ..errors import BoundsError
from .accesses import Access
from .isl_adapter import IslNames, affine, condition, equals, make_set, pw_aff_to_expr, set_to_condition


@dataclass(frozen=True)
class Loop:
    var: Var
    min: Expr
    extent: Expr


@dataclass(frozen=True)
class LetBinding:
    var: Var
    value: Expr


@dataclass
class Region:
    """Per dimension: the first element needed, how many, and the buffer extent to allocate.

    ``whole_dims`` are the dimensions taken whole (min 0, the tensor's full extent) because an
    index or the extent is not affine: the region there is an over-approximation, not exact.
    """

    mins: List[Expr]
    extents: List[Expr]
    alloc_extents: List[Expr]
    whole_dims: frozenset = frozenset()


def _loop_constraints(loop: Loop, names: IslNames) -> List[str]:
    lo, ext = affine(loop.min, names), affine(loop.extent, names)
    v = names(loop.var)
    out = []
    if lo is not None:
        out.append(f"{v} >= {lo}")
        if ext is not None:
            out.append(f"{v} < {lo} + {ext}")
    elif isinstance(loop.extent, Const) and loop.extent.value == 1:
        # a let that depends on a thread loop, made a one-iteration loop: its value may be a
        # select (a partial register block's extent), which ``equals`` states piecewise; left
        # unconstrained it would let the region run to the tensor's end (a 64-wide tile of a
        # 200-wide matrix then allocated all 200 columns)
        text = equals(v, loop.min, names)
        if text is not None:
            out.append(text)
    return out


def _context_constraints(context: Sequence, names: IslNames) -> List[str]:
    out = []
    for entry in context:
        if isinstance(entry, Loop):
            out += _loop_constraints(entry, names)
        else:
            text = equals(names(entry.var), entry.value, names)
            if text is not None:
                out.append(text)
    return out


def _params(size_vars: Sequence[Var], names: IslNames, exclude: Sequence[str]) -> List[str]:
    """Every name isl has seen that is not a set dim: sizes and free variables."""
    return [n for n in names.var_of if n not in set(exclude)]


def required_region(context: Sequence, inner_loops: Sequence[Loop], guards: Sequence[Expr],
                    accesses: Sequence[Access], shape: Sequence[Expr], size_vars: Sequence[Var]) -> Region:
    """The region of a producer of ``shape`` read by ``accesses`` inside ``inner_loops``.

    ``context`` lists the loops (and lets) enclosing the attach point, outermost first.
    """
    names = IslNames()
    ndim = len(shape)
    outer = [e.var for e in context]
    outer_names = [names(v) for v in outer]
    inner_names = [names(l.var) for l in inner_loops]
    dims = [f"d{k}_" for k in range(ndim)]
    base = _context_constraints(context, names)
    for l in inner_loops:
        base += _loop_constraints(l, names)
    for g in guards:
        text = condition(g, names)
        if text is not None:
            base.append(text)
    for s in size_vars:
        base.append(f"{names(s)} >= 1")
    box = []
    fallback_dims = set()
    for k, extent in enumerate(shape):
        ext = affine(extent, names)
        box.append(f"{dims[k]} >= 0")
        if ext is not None:
            box.append(f"{dims[k]} < {ext}")
        else:
            fallback_dims.add(k)
    pieces = []
    for acc in accesses:
        cons = []
        cond = condition(acc.condition, names) if acc.condition is not None else None
        if cond is not None:
            cons.append(cond)
        for k, index in enumerate(acc.indices):
            text = equals(dims[k], index, names)
            if text is None:
                fallback_dims.add(k)
            else:
                cons.append(text)
        pieces.append(cons)
    set_dims = outer_names + inner_names + dims
    params = _params(size_vars, names, set_dims)
    # the loops, guards and box once, intersected with the union of what each access reads (parsing
    # them into every access's set made isl parse the same constraints dozens of times a kernel)
    accessed = None
    for cons in dict.fromkeys(tuple(c) for c in pieces):
        part = make_set(params, set_dims, cons)
        accessed = part if accessed is None else accessed.union(part)
    full = make_set(params, set_dims, base + box)
    if accessed is not None:
        full = full.intersect(accessed)
    n_outer, n_inner = len(outer_names), len(inner_names)
    region = full.project_out(isl.dim_type.set, n_outer, n_inner)  # [outer..., d...]
    outer_domain = make_set(params, outer_names, _context_constraints(context, names) +
                            [f"{names(s)} >= 1" for s in size_vars])
    n_params = region.dim(isl.dim_type.param)
    region_p = region.move_dims(isl.dim_type.param, n_params, isl.dim_type.set, 0, n_outer).coalesce()
    ctx_params = outer_domain.move_dims(isl.dim_type.param, n_params, isl.dim_type.set, 0, n_outer).params()
    nonempty = region_p.params().gist(ctx_params)

    mins, extents, allocs = [], [], []
    for k in range(ndim):
        if k in fallback_dims:
            mins.append(const(0))
            extents.append(shape[k])
            allocs.append(shape[k])
            continue
        lo = region_p.dim_min(k).gist(ctx_params).coalesce()
        hi = region_p.dim_max(k).gist(ctx_params).coalesce()
        ext_pw = hi.sub(lo).add(isl.PwAff.val_on_domain(lo.domain(), isl.Val.int_from_si(lo.get_ctx(), 1)))
        lo_expr = pw_aff_to_expr(lo, names)
        ext_expr = pw_aff_to_expr(ext_pw, names)
        if not nonempty.plain_is_universe():
            ext_expr = select(set_to_condition(nonempty, names), ext_expr, const(0))
        mins.append(lo_expr)
        extents.append(ext_expr)
        allocs.append(_max_over_outer(ext_pw, outer_domain, n_params, n_outer, names, shape[k]))
    return Region(mins, extents, allocs, frozenset(fallback_dims))


def _max_over_outer(ext_pw: isl.PwAff, outer_domain: isl.Set, n_params: int, n_outer: int,
                    names: IslNames, fallback: Expr) -> Expr:
    """max of ``ext_pw`` over the outer loop values: the buffer extent for one instance."""
    try:
        moved = ext_pw.move_dims(isl.dim_type.in_, 0, isl.dim_type.param, n_params, n_outer)
        as_map = isl.Map.from_pw_aff(moved).intersect_domain(outer_domain)
        values = as_map.range()
        if values.is_empty():
            return const(0)
        best = values.dim_max(0).coalesce()
        result = pw_aff_to_expr(best, names)
        if not isinstance(result, Const):
            # a constant upper bound over all sizes gives a fixed-size (stack) buffer
            n = values.dim(isl.dim_type.param)
            flat = values.move_dims(isl.dim_type.set, 1, isl.dim_type.param, 0, n)
            flat = flat.project_out(isl.dim_type.set, 1, n)
            if flat.is_bounded():
                result = pw_aff_to_expr(flat.dim_max(0), names)
    except (isl.Error, KeyError):
        return fallback
    if not isinstance(result, Const) and not isinstance(fallback, Const):
        return result
    if not isinstance(result, Const):
        return fallback  # unbounded in the sizes: a constant full extent is smaller to reason about
    return result


def check_accesses_in_bounds(op_name: str, domain: Sequence[Loop], accesses: Sequence[Access],
                             shapes: dict) -> None:
    """Raise BoundsError if isl proves that an access can leave its tensor's extent."""
    for acc in accesses:
        if acc.condition is None:
            continue
        names = IslNames()
        cons = []
        for l in domain:
            cons += _loop_constraints(l, names)
        cond = condition(acc.condition, names)
        if cond is None:
            continue
        cons.append(cond)
        shape = shapes[acc.tensor]
        outside = []
        texts = []
        ok = True
        for k, index in enumerate(acc.indices):
            idx, ext = affine(index, names), affine(shape[k], names)
            if idx is None or ext is None:
                ok = False
                break
            texts.append((idx, ext))
            outside.append(f"({idx} < 0 or {idx} >= {ext})")
        if not ok or not outside:
            continue
        all_names = list(names.var_of)
        for n in all_names:
            v = names.var_of[n]
            if all(v is not l.var for l in domain):
                cons.append(f"{n} >= 1")  # a size, or a variable used in a bound
        violations = make_set([], all_names, cons + [" or ".join(outside)])
        if violations.is_empty():
            continue
        point = violations.sample_point()
        values = {n: int(point.get_coordinate_val(isl.dim_type.set, k).to_python())
                  for k, n in enumerate(all_names)}
        _raise_out_of_bounds(op_name, acc, shape, names, values)


def _raise_out_of_bounds(op_name, acc: Access, shape, names: IslNames, values: dict):
    at = ", ".join(f"{names.var_of[n].name} = {v}" for n, v in values.items())
    mapping = {names.var_of[n]: const(v) for n, v in values.items()}
    # substitute() rebuilds nodes without folding; fold so the offending index is a number
    idx = [simplify_expr(substitute(i, mapping)) for i in acc.indices]
    ext = [simplify_expr(substitute(s, mapping)) for s in shape]
    bad = [k for k, (i, e) in enumerate(zip(idx, ext))
           if isinstance(i, Const) and isinstance(e, Const) and not 0 <= i.value < e.value]
    detail = "; ".join(f"index {expr_to_str(idx[k])} on dimension {k} of extent {expr_to_str(ext[k])}" for k in bad)
    access = f"{acc.tensor.name}[{', '.join(expr_to_str(i) for i in acc.indices)}]"
    raise BoundsError(
        f"compute '{op_name}' reads {access} outside the extent of '{acc.tensor.name}' "
        f"(shape [{', '.join(expr_to_str(s) for s in shape)}]): for example at {at} it reads {detail}.\n"
        f"  fix: shrink the compute's domain, clamp the index, or guard the read with "
        f"lw.if_then_else(<in bounds>, {access}, <padding value>)")
