"""loop_partition: split loops so the main part runs without tail guards.

Before: guards ``if a*v + ... < b`` (from non-dividing splits, or anything affine)
inside loops over ``v``.  For each loop, isl computes the range of ``v`` in which
every such guard holds for *all* iterations of the loops between the loop and the
guard.  The loop becomes up to three loops: a prefix and a suffix that keep the
original body, and a main part in which those guards are replaced by ``True``.
Proven-always-true guards are dropped without splitting.  Loops inside the copies
are partitioned in turn, so a tile loop's tail iteration gets its inner loop split.

After: guards remain only in tails; when the split divides the extent, isl proves
the tail empty and no tail loop is emitted.  Guards that are not affine, use a
variable bound inside the loop, or involve modulo are left as they were.

In the main part (and in a loop whose guards all hold), integer ``min``/``max`` and
``select``s are decided over the part's range as well (``_Decide``): a tile of symbolic
extent ``n`` split by 32 has inner loops of extent ``min(n - 32*jo, 32)`` (bound
inference sees every tile, the last one included); in the main part that is ``32``, so
the tile's loops get constant extents and can be vectorized.  A select whose branches
agree wherever its condition holds (a region extent, ``n - 32*jo`` exactly when that is
32) becomes the other branch.  Variables bound inside the loop are left unconstrained in
these questions (the answer must hold for every value of them), so the rewrite is exact.

The main range's bounds are single formulas where isl proves one piece of them right for every
size >= 0 (``n // 8`` rather than ``select(n <= 7, -1, n // 8 - 1) + 1``): the tail's bounds read
as the split says.
"""
from __future__ import annotations

from typing import List, Sequence

import islpy as isl

from ...dsl import dtypes
from ...dsl.expr import Compare, Const, Expr, Logical, binary, const
from ...dsl.visitor import Mutator, collect_vars, post_order_visit, uses_var
from ...errors import InternalError
from ..accesses import negate
from ..ir import NOOP, For, IfThenElse, seq
from ..isl_adapter import (IslNames, affine, condition, make_set, negated_condition, one_piece, pw_aff_to_expr,
                           range_constraint)


MAX_ISL_OPERATIONS = 1_000_000  # ~0.1 s of isl work for one loop; see _Partition._main_range


def _atoms(cond: Expr) -> List[Expr]:
    if isinstance(cond, Logical) and cond.op == "and":
        return _atoms(cond.a) + _atoms(cond.b)
    return [cond]


def _has_mod(e: Expr) -> bool:
    hit = []
    post_order_visit(e, lambda n: hit.append(1) if getattr(n, "op", None) == "floormod" else None)
    return bool(hit)


class _Guard:
    def __init__(self, atom: Compare, inner_loops: Sequence[For]):
        self.atom, self.inner_loops = atom, list(inner_loops)


def _collect_guards(loop: For) -> List[_Guard]:
    """Affine guard atoms inside ``loop`` that depend on its variable."""
    found: List[_Guard] = []
    bound_inside = set()

    def walk(s, inner):
        kind = type(s).__name__
        if kind == "For":
            bound_inside.add(id(s.var))
            walk(s.body, inner + [s])
        elif kind == "Seq":
            for c in s.stmts:
                walk(c, inner)
        elif kind in ("LetStmt",):
            bound_inside.add(id(s.var))
            walk(s.body, inner)
        elif kind == "Allocate":
            walk(s.body, inner)
        elif kind == "IfThenElse":
            for atom in _atoms(s.condition):
                if isinstance(atom, Compare) and atom.op in ("lt", "le", "gt", "ge") and not _has_mod(atom):
                    vars_ = collect_vars(atom)
                    # the inner loops' bounds become constraints too: like the guard itself they
                    # must not use a variable bound inside ``loop`` (e.g. a region extent let)
                    for l in inner:
                        vars_ = vars_ + collect_vars(l.min) + collect_vars(l.extent)
                    if any(v is loop.var for v in collect_vars(atom)) and not any(
                            id(v) in bound_inside and all(v is not l.var for l in inner) for v in vars_):
                        found.append(_Guard(atom, inner))
            walk(s.then_case, inner)
            if s.else_case is not None:
                walk(s.else_case, inner)

    walk(loop.body, [])
    return found


class _ReplaceAtoms(Mutator):
    """The guards' ``atoms`` decided: dropped from their conditions (``holds``), or (not ``holds``)
    their ifs reduced to the else branch, or to nothing."""

    def __init__(self, atoms, holds: bool = True):
        self.atoms, self.holds = atoms, holds

    def visit_IfThenElse(self, node):
        parts = _atoms(node.condition)
        kept = [p for p in parts if not any(p is a for a in self.atoms)]
        if not self.holds and len(kept) < len(parts):
            return NOOP if node.else_case is None else self.visit(node.else_case)
        then_case = self.visit(node.then_case)
        else_case = None if node.else_case is None else self.visit(node.else_case)
        if len(kept) == len(parts) and then_case is node.then_case and else_case is node.else_case:
            return node
        if not kept:
            return then_case
        cond = kept[0]
        for p in kept[1:]:
            cond = Logical("and", cond, p)
        return IfThenElse(cond, then_case, else_case)


class _Decide(Mutator):
    """Integer min/max and selects in a loop body, decided over the loop part's range.

    ``good`` is the isl set of the loop variable (set dimension ``v``, parameters: sizes and
    outer loop variables) on which the part runs.  Each question asks whether a condition
    can hold anywhere in ``good``, every other variable of the expression (bound inside the
    loop) left free: "never" is then true for every value they take."""

    def __init__(self, good: isl.Set, names: IslNames, v: str):
        self.good, self.names, self.v = good, names, v
        self.answers = {}

    def never(self, text: str) -> bool:
        answer = self.answers.get(text)
        if answer is None:
            params = [n for n in self.names.var_of if n != self.v]
            try:
                answer = self.good.intersect(make_set(params, [self.v], [text])).is_empty()
            except (isl.Error, InternalError):
                # isl gives up on a long condition ("maximal number of operations exceeded", as
                # the select chains of a register-tiled Winograd matmul computed per output row
                # gave): not proven, so the select stays, which is always correct
                answer = False
            self.answers[text] = answer
        return answer

    def visit_Binary(self, node):
        node = self.generic_visit(node)
        if node.op not in ("min", "max") or not dtypes.is_int(node.dtype):
            return node
        a, b = affine(node.a, self.names), affine(node.b, self.names)
        if a is None or b is None:
            return node
        if self.never(f"{a} > {b}"):            # a <= b throughout
            return node.a if node.op == "min" else node.b
        if self.never(f"{b} > {a}"):
            return node.b if node.op == "min" else node.a
        return node

    def visit_Select(self, node):
        node = self.generic_visit(node)
        if not dtypes.is_int(node.dtype):
            return node
        c = condition(node.condition, self.names)
        nc = negated_condition(node.condition, self.names)
        if c is not None and self.never(c):
            return node.false_value
        if nc is not None and self.never(nc):
            return node.true_value
        t, f = affine(node.true_value, self.names), affine(node.false_value, self.names)
        if t is None or f is None:
            return node
        differ = f"({t} < {f} or {t} > {f})"
        if c is not None and self.never(f"({c}) and {differ}"):
            return node.false_value
        if nc is not None and self.never(f"({nc}) and {differ}"):
            return node.true_value
        return node


class _Partition(Mutator):
    def __init__(self, size_vars=()):
        self.outer: List[For] = []
        self.size_ids = {id(v) for v in size_vars}

    def visit_For(self, node):
        if node.kind == "thread":
            return self._descend(node)   # a GPU axis is not a loop to cut: its extent is the launch extent
        guards = _collect_guards(node)
        if not guards or node.kind in ("vectorized",) and not isinstance(node.extent, Const):
            return self._descend(node)
        split = self._main_range(node, guards)
        if split is None:
            return self._descend(node)
        lo, hi, always, atoms, decide, fails_outside = split
        main_body = decide(_ReplaceAtoms(atoms).visit(node.body))
        if always:
            return self._descend(For(node.var, node.min, node.extent, node.kind, main_body, node.annotations))
        # outside the main range a lone guard of the loop's own variable (and outer ones) fails at every
        # iteration: the tail's ifs go (a symbolic tail tile then runs its n - 8*jo columns, not 8 guards)
        rest = _ReplaceAtoms(atoms, holds=False).visit(node.body) if fails_outside else node.body
        end = binary("add", node.min, node.extent)
        prefix = For(node.var, node.min, binary("sub", lo, node.min), node.kind, rest, node.annotations)
        main = For(node.var, lo, binary("add", binary("sub", hi, lo), const(1)), node.kind, main_body,
                   node.annotations)
        suffix = For(node.var, binary("add", hi, const(1)), binary("sub", end, binary("add", hi, const(1))),
                     node.kind, rest, node.annotations)
        parts = [self._descend(p) for p in (prefix, main, suffix)
                 if not (isinstance(p.extent, Const) and p.extent.value <= 0)]
        return seq(*parts)

    def _descend(self, node: For):
        self.outer.append(node)
        body = self.visit(node.body)
        self.outer.pop()
        if body is node.body:
            return node
        return For(node.var, node.min, node.extent, node.kind, body, node.annotations)

    def _main_range(self, loop: For, guards: List[_Guard]):
        """``_main_range_isl`` under an isl operation budget: some guard sets (nested splits
        of region extents with floor divisions) make isl run for tens of seconds; past the
        budget the loop is simply left unpartitioned, which is always correct."""
        ctx = isl.DEFAULT_CONTEXT
        ctx.set_max_operations(MAX_ISL_OPERATIONS)
        ctx.reset_operations()
        try:
            return self._main_range_isl(loop, guards)
        except isl.Error:
            return None
        finally:
            ctx.set_max_operations(0)

    def _main_range_isl(self, loop: For, guards: List[_Guard]):
        names = IslNames()
        v = names(loop.var)
        # an outer loop's bounds may hold a select: without its range, a tail tile's guard (``32*jo + ji <
        # n``) had no main range (``jo`` unconstrained), and its loop kept a guard per element (a 1 x 1
        # attention score ran its 8 x 32 epilogue tile, 256 guards, per head)
        outer = [(c, _var_ids(l.var, l.min, l.extent)) for c, l in
                 ((range_constraint(l.var, l.min, l.extent, str(k), names), l) for k, l in enumerate(self.outer)) if c]
        outer_cons = [c for c, _ in outer]
        lo_t, ext_t = affine(loop.min, names), affine(loop.extent, names)
        if lo_t is None or ext_t is None:
            return None
        range_cons = [f"{lo_t} <= {v} < {lo_t} + {ext_t}"]
        own_ids = _var_ids(loop.var, loop.min, loop.extent)
        usable = []
        texts = []
        for g in guards:
            neg = negate(g.atom)
            neg_t = condition(neg, names) if neg is not None else None
            inner_cons = []
            inner_names = []
            ok = neg_t is not None
            for l in g.inner_loops:
                a, e = affine(l.min, names), affine(l.extent, names)
                if a is None or e is None:
                    ok = False
                    break
                inner_cons.append(f"{a} <= {names(l.var)} < {a} + {e}")
                inner_names.append(names(l.var))
            if ok:
                usable.append(g)
                seeds = own_ids | _var_ids(g.atom, *(e for l in g.inner_loops for e in (l.var, l.min, l.extent)))
                texts.append((neg_t, inner_cons, inner_names, _related(outer, seeds)))
        if not usable:
            return None
        params = [n for n in names.var_of if n != v and not any(n in t[2] for t in texts)]
        params = [n for n in params if all(n not in t[2] for t in texts)]
        domain = make_set(params, [v], range_cons + outer_cons)
        good = domain
        for neg_t, inner_cons, inner_names, related_cons in texts:
            inner_names_here = list(inner_names)
            bad = make_set(params, [v] + inner_names_here, range_cons + related_cons + inner_cons + [neg_t])
            bad_v = bad.project_out(isl.dim_type.set, 1, len(inner_names_here))
            good = good.subtract(bad_v)
        good = good.coalesce()
        atoms = [g.atom for g in usable]

        def decide(body):
            ctx = isl.DEFAULT_CONTEXT
            ctx.set_max_operations(MAX_ISL_OPERATIONS)
            ctx.reset_operations()
            try:
                return _Decide(good, names, v).visit(body)
            finally:
                ctx.set_max_operations(0)
        if good.is_equal(domain):
            return const(0), const(0), True, atoms, decide, False
        if good.is_empty():
            return None
        # one guard that reads no variable of a loop between it and this one, and the main range all of
        # the good set: every iteration outside it fails the guard (a symbolic reduction's last k steps
        # past n ran their whole row loop under a guard that never held)
        fails_outside = len(usable) == 1 and good.n_basic_set() == 1 and not any(
            uses_var(usable[0].atom, loop.var) for loop in usable[0].inner_loops)
        params_ctx = domain.params()
        # the main range must be one interval: every v between lo and hi is good.  One convex piece
        # after coalescing is; of several, the one that holds for every size (``decide`` then works
        # in it too).  (Not ``good.polyhedral_hull()`` compared with ``good``: on the pieces of a
        # ragged CUDA gemm's split reduction that segfaulted inside isl, in CI only.)
        if good.n_basic_set() != 1:
            good = _unconditional_piece(good, params_ctx)
            if good is None:
                return None
        min_pw = isl.PwAff(f"[{', '.join(params)}] -> {{ [({lo_t})] }}")
        lo_pw = good.dim_min(0).union_max(min_pw).gist(params_ctx).coalesce()
        hi_pw = good.dim_max(0).union_max(min_pw.add(isl.PwAff(f"[{', '.join(params)}] -> {{ [(-1)] }}")))
        hi_pw = hi_pw.gist(params_ctx).coalesce()
        sizes = [n for n, var in names.var_of.items() if id(var) in self.size_ids]
        lo_pw, hi_pw = one_piece(lo_pw, sizes), one_piece(hi_pw, sizes)
        lo_e, hi_e = pw_aff_to_expr(lo_pw, names), pw_aff_to_expr(hi_pw, names)
        if len(lo_pw.get_pieces()) > 2 or len(hi_pw.get_pieces()) > 2:
            return None
        return lo_e, hi_e, False, atoms, decide, fails_outside


def _var_ids(*exprs) -> set:
    return {id(v) for e in exprs for v in collect_vars(e)}


def _related(constraints, seeds: set) -> List[str]:
    """Of ``constraints`` ((isl text, ids of its variables)), those linked to the variables ``seeds``
    through shared variables.  The others constrain only variables of their own, so a guard's failing
    set taken without them, subtracted from the loop's domain (which has them), leaves the same good
    set, and isl does not parse the selects of every unrelated outer loop's bounds once per guard."""
    reach, kept = set(seeds), set()
    grew = True
    while grew:
        grew = False
        for k, (_, ids) in enumerate(constraints):
            if k not in kept and ids & reach:
                kept.add(k)
                reach |= ids
                grew = True
    return [text for k, (text, _) in enumerate(constraints) if k in kept]


def _unconditional_piece(good: isl.Set, params: isl.Set):
    """Of a main range that is not one interval, its convex piece that holds for every value of the
    sizes, if any: ``0 <= jo <= 1569`` of ``{0 <= jo <= 1569; jo = 1570 : m <= 0}`` (a guard that
    also holds in the last tile when the row count is 0).  A part of the good set: still exact."""
    for piece in good.get_basic_sets():
        piece = isl.Set.from_basic_set(piece)
        if piece.params().is_equal(params):
            return piece
    return None


def loop_partition(stmt, ctx):
    return _Partition(getattr(ctx, "size_vars", ())).visit(stmt)
