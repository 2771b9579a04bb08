"""The search space: one sketch per task, generated from the compute DAG alone.

A sketch is a list of named decisions, each with its legal choices (``Space.decisions``);
``Space.apply(choice)`` turns one assignment into a Schedule through the ordinary
schedule API, so the result carries its replayable trace.  The rules:

* the output stage is tiled over every spatial axis: ``tile:AXIS`` rows of each axis but
  the last, ``nr`` vector columns of the last (``tail="shift"`` full tiles where legal);
  the outer tile loops run in ``order`` (columns first or last), the leading ones fused
  and run in parallel (``parallel``), the inner ones unrolled (``unroll_rows``) and the
  last vectorized;
* the *anchor* is the reduction computed at the register tile: the output itself through
  a ``cache_write`` accumulator (``cache_write``), or a reduction producer of the output's
  shape whose consumers up to the output are elementwise (a conv under its bias/ReLU/
  residual epilogue: ``place:NAME = "register"``, the epilogue inlined).  Its reduction
  loops run outside the tile, the tile's rows unrolled in ``tile_order`` (which row axis
  is innermost decides which operand is reused from registers) and its columns in vectors; one
  operand of the anchor may be packed by ``cache_read`` at the parallel loop (``pack``), and one
  that it reads along the reduction across its vectors (``K`` in ``Q·Kᵀ``) from a copy stored
  transposed at root (``pack_t:NAME``, for register-tiled producers too);
* without an anchor, an output reduction may be split (``ksplit``) between the tile loops; one with
  fewer points than its reduction is long, along rows (a row sum, a full sum), may instead be
  ``rfactor``-ed into vector partial results (``rfactor:OUT``), in ``rfactor_parts:OUT`` parallel
  chunks of the reduction when the rows are too few to run in parallel;
* other producers: elementwise ones inlined, computed at the output's row tile, at its
  outermost (parallel) loop (``outer``), or at root, their last axis in vectors and a short
  axis before it optionally unrolled (``unroll:NAME``: a select on it then folds); reductions
  at the row tile, the outermost loop or root; a long one-axis reduction (softmax's max and
  sum, layer norm's moments) may be ``rfactor``-ed into ``lanes`` vectorized partial results
  (``rfactor:NAME``); a reduction producer with rows (that one too: ``Q·Kᵀ``) may get its own
  register tile (``regtile:NAME``: a ``cache_write`` accumulator over ``tile:NAME.AXIS`` rows and
  a vector of its last axis, of a long one ``nr:NAME`` columns, its untiled axes outermost or
  not, ``singles_first:NAME``, its rows in either order, ``tile_order:NAME``): Ansor's
  multi-level tiling for every reduction stage, so a chain such as Winograd's input
  transform -> 16 matmuls -> output transform can run per row of the output, each stage in
  registers; producers at root run their outer loops in parallel;
* the output's outer loops run in axis order, or with one row axis moved first (``lead``:
  the rows before the channels, so producers computed per row are not recomputed per channel
  block).

A mutation is the same sketch with one decision changed (``Space.mutate``).  Sampling keeps
a register tile within the machine's vector registers.
"""
from __future__ import annotations

import math
import random
from typing import Dict, List, Optional, Tuple

from ..dsl.expr import TensorLoad
from ..dsl.schedule import create_schedule
from ..dsl.visitor import collect_vars, post_order_visit
from ..dsl.tensor import PlaceholderOp
from .task import Task, compute_stages, const_int

Choice = Dict[str, object]

#: share of fresh samples drawn with the anchor register-tiled (the rest: every decision uniform)
REGISTER_SKETCH_SHARE = 0.6

def _divisor_like(extent: int, options) -> list:
    return [o for o in options if o <= extent] or [extent]


def _tile_options(extent: int) -> list:
    """Row-tile sizes for one axis: small register-friendly sizes and the divisors up to 16."""
    opts = {o for o in (1, 2, 3, 4, 6, 8, 12, 16) if o <= extent}
    opts.update(dv for dv in range(2, 17) if extent % dv == 0)
    return sorted(opts)


def _row_reducible(t, lanes: int) -> bool:
    """A one-axis reduction long enough that ``lanes`` partial results pay, along rows: every
    input of rank >= 2 indexed by the reduction has it in its innermost index (softmax's max
    and sum, layer norm's moments; not a matmul, whose columns vectorize without partials)."""
    reds = t.op.reduce_axis
    if len(reds) != 1 or (const_int(reds[0].extent) or 0) < 4 * lanes or t.op.num_outputs != 1:
        return False
    k = reds[0].var
    found = []
    post_order_visit(t.op.body[0], lambda e: found.append(e) if isinstance(e, TensorLoad) else None)

    def uses_k(e):
        return any(v is k for v in collect_vars(e))
    # inputs not indexed by k are broadcast over it (layer norm's mean in its variance)
    return all(len(e.indices) < 2 or not uses_k(e) or uses_k(e.indices[-1]) for e in found)


def _transposable(t) -> Optional[Tuple[int, int]]:
    """(position among ``t``'s inputs, dimension) of a placeholder that a register tile of ``t``
    reads across its vectors with a stride: its innermost index is the reduction and that dimension
    ``t``'s last (vector) axis, as ``K`` in ``Q·Kᵀ``'s ``S[i, j] = sum_r Q[i, r] * K[j, r]``; None if
    none.  A copy of it stored with that dimension innermost (``_pack_transposed``) makes those
    loads vectors."""
    if len(t.op.reduce_axis) != 1 or len(t.op.axis) < 2 or t.op.num_outputs != 1:
        return None
    k, j = t.op.reduce_axis[0].var, t.op.axis[-1].var

    def only(e, v):
        vs = collect_vars(e)
        return len(vs) == 1 and vs[0] is v
    loads = []
    post_order_visit(t.op.body[0], lambda e: loads.append(e) if isinstance(e, TensorLoad) else None)
    for pos, inp in enumerate(t.op.input_tensors):
        if not isinstance(inp.op, PlaceholderOp) or len(inp.shape) < 2:
            continue
        for e in loads:
            if e.tensor.op is inp.op and only(e.indices[-1], k):
                dim = next((d for d, ix in enumerate(e.indices[:-1]) if only(ix, j)), None)
                if dim is not None:
                    return pos, dim
    return None


def _shape(t) -> list:
    return [const_int(d) for d in t.shape]


def _short_axis(t) -> Optional[int]:
    """The index of an elementwise stage's axis before its last when it is short enough to
    unroll (2..16 points) and not its first (which runs in parallel at root), else None."""
    shape = _shape(t)
    if len(shape) >= 3 and shape[-2] is not None and 2 <= shape[-2] <= 16:
        return len(shape) - 2
    return None


def _accumulate_in_tile(A, factors, reversed_rows: bool, unroll: bool) -> None:
    """Order an accumulator stage ``A`` computed at its tile: the axes the tile does not split
    (factor 1: one point there) outside the reduction, which makes the lowering accumulate in a
    register tile of the split ones; those inside it (in reverse with ``reversed_rows``: the
    innermost row decides which operand is reused from a register), unrolled with ``unroll``,
    and the last axis in vectors."""
    axes = list(A.op.axis)
    single = [a for a, f in zip(axes[:-1], factors) if f == 1]
    tiled = [a for a, f in zip(axes[:-1], factors) if f > 1]
    if reversed_rows:
        tiled.reverse()
    A.reorder(*single, *A.op.reduce_axis, *tiled, axes[-1])
    if unroll:
        for a in tiled:
            A.unroll(a)
    A.vectorize(axes[-1])


def _find_anchor(out, producers) -> Tuple[Optional[object], list]:
    """The reduction producer to compute at the output's register tile, and its epilogue.

    It has the output's shape, and every stage between it and the output is elementwise
    (no reduction), so inlining those leaves the output reading it point for point."""
    readers: Dict[int, list] = {}
    for t in producers + [out]:
        for inp in t.op.input_tensors:
            readers.setdefault(id(inp.op), []).append(t)
    for cand in reversed(producers):
        if not cand.op.reduce_axis or cand.op.num_outputs != 1 or _shape(cand) != _shape(out):
            continue
        between, stack, ok = [], list(readers.get(id(cand.op), [])), True
        while stack:
            t = stack.pop()
            if t.op is out.op or any(t.op is b.op for b in between):
                continue
            if t.op.reduce_axis:
                ok = False
                break
            between.append(t)
            stack.extend(readers.get(id(t.op), []))
        if ok:
            return cand, between
    return None, []


class Space:
    def __init__(self, task: Task):
        self.task = task
        out = task.outputs[-1]
        self.out = out
        self.producers = [t for t in compute_stages(task.outputs) if t.op is not out.op]
        self.lanes = task.target.lanes(out.dtype)
        shape = [s or 1 for s in _shape(out)]
        self.shape = shape
        self.anchor, self.epilogue = (None, []) if out.op.reduce_axis else _find_anchor(out, self.producers)
        d: List[Tuple[str, list]] = []
        self.regtiled: List[object] = []       # reduction producers that may get their own register tile
        for t in self.producers:
            if t is self.anchor:
                d.append((f"place:{t.name}", ["register", "tile", "root"]))
            elif t.op.reduce_axis:
                d.append((f"place:{t.name}", ["tile", "root", "outer"]))
            else:
                d.append((f"place:{t.name}", ["inline", "tile", "root", "outer"]))
                if _short_axis(t) is not None:
                    d.append((f"unroll:{t.name}", [False, True]))
            if t.op.reduce_axis and _row_reducible(t, task.target.lanes(t.dtype)):
                d.append((f"rfactor:{t.name}", [True, False]))
            if t.op.reduce_axis and t is not self.anchor and self._tileable(t):
                # a row-reducible one too when it has rows to tile (Q·Kᵀ: a matmul whose operands
                # both run along the reduction), its strided operand then stored transposed
                self.regtiled.append(t)
                d.append((f"regtile:{t.name}", [False, True]))
                if _transposable(t) is not None:
                    d.append((f"pack_t:{t.name}", [False, True]))
                last, lanes = _shape(t)[-1], task.target.lanes(t.dtype)
                if last > 4 * lanes:
                    # columns of the tile: a whole row of 512 scores is 32 vectors per tile row
                    d.append((f"nr:{t.name}", [lanes, 2 * lanes, 4 * lanes, last]))
                for ax, ext in zip(t.op.axis[:-1], _shape(t)[:-1]):
                    if (ext or 1) > 1:
                        d.append((f"tile:{t.name}.{ax.var.name}", _tile_options(ext)))
                d.append((f"singles_first:{t.name}", [False, True]))
                d.append((f"tile_order:{t.name}", ["natural", "reversed"]))
        rows = [ax for ax, ext in zip(out.op.axis[:-1], shape[:-1]) if ext > 1]
        for ax, ext in zip(out.op.axis[:-1], shape[:-1]):
            if ext > 1:
                d.append((f"tile:{ax.var.name}", _tile_options(ext)))
        if len(rows) >= 2:
            d.append(("lead", ["natural"] + [ax.var.name for ax in rows[1:]]))
        lanes = self.lanes
        d.append(("nr", _divisor_like(shape[-1], [lanes, 2 * lanes, 3 * lanes, 4 * lanes])))
        if sum(ext > 1 for ext in shape[:-1]) >= 2 and (out.op.reduce_axis or self.anchor is not None):
            # which row axis of a register tile runs innermost: the operand it indexes is reused
            # across the other (conv: output channels innermost reuse each input value)
            d.append(("tile_order", ["natural", "reversed"]))
        if len(shape) >= 2:
            d.append(("order", ["cols_outer", "rows_outer"]))
        reduction = out if out.op.reduce_axis else self.anchor
        if reduction is not None:
            if out.op.reduce_axis:
                d.append(("cache_write", [True, False]))
            packable = [i for i, t in enumerate(reduction.op.input_tensors)
                        if isinstance(t.op, PlaceholderOp) and len(t.shape) >= 2]
            if packable:
                d.append(("pack", [None] + packable))
            if _transposable(reduction) is not None:
                d.append((f"pack_t:{reduction.name}", [False, True]))
        if out.op.reduce_axis:
            kext = const_int(out.op.reduce_axis[0].extent) or 1
            d.append(("ksplit", [0] + _divisor_like(kext, [4, 8, 16, 64, 256])))
        if self._output_factorable():
            d.append((f"rfactor:{out.name}", [False, True]))
            kext = const_int(out.op.reduce_axis[0].extent)
            d.append((f"rfactor_parts:{out.name}", [1] + [p for p in (8, 64) if p * 4 * self.lanes <= kext]))
        d.append(("parallel", ["outer", "fuse2", "none"]))
        d.append(("unroll_rows", [True, False]))
        self.decisions = d

    def _output_factorable(self) -> bool:
        """An output reduction with fewer points than its reduction is long, along rows (a row sum of
        a 4096x4096 matrix, a full sum): a serial scalar chain per output point unless ``rfactor``-ed
        into vector partial results, split into parallel parts when the rows are too few to share
        (``_factored_output``)."""
        out = self.out
        if not out.op.reduce_axis or not _row_reducible(out, self.lanes):
            return False
        points = math.prod(self.shape)
        return points <= (const_int(out.op.reduce_axis[0].extent) or 0)

    def _tileable(self, t) -> bool:
        """A reduction producer with rows and a last axis of whole vectors: it can be register-tiled."""
        shape = _shape(t)
        lanes = self.task.target.lanes(t.dtype)
        return (t.op.num_outputs == 1 and len(shape) >= 2 and all(shape) and shape[-1] % lanes == 0
                and any(e > 1 for e in shape[:-1]))

    # -- sampling ------------------------------------------------------------
    def register_tiled(self, choice: Choice) -> bool:
        if self.out.op.reduce_axis:
            return bool(choice.get("cache_write"))
        return self.anchor is not None and choice.get(f"place:{self.anchor.name}") == "register"

    def tile_vectors(self, choice: Choice) -> int:
        """Accumulator vectors one register tile holds."""
        n = math.ceil(int(choice.get("nr") or self.lanes) / self.lanes)
        for ax in self.out.op.axis[:-1]:
            n *= int(choice.get(f"tile:{ax.var.name}", 1))
        return n

    def producer_tile_vectors(self, t, choice: Choice) -> int:
        """Accumulator vectors of a register-tiled producer's tile (its ``nr:`` columns, else one
        vector of its last axis)."""
        n = math.ceil(int(choice.get(f"nr:{t.name}", 0)) / self._lanes(t)) or 1
        for ax in t.op.axis[:-1]:
            n *= int(choice.get(f"tile:{t.name}.{ax.var.name}", 1))
        return n

    def _fits(self, choice: Choice) -> bool:
        registers = self.task.target.vector_registers     # AVX-512 and AArch64: 32; AVX2: 16
        if any(choice.get(f"regtile:{t.name}") and self.producer_tile_vectors(t, choice) > registers
               for t in self.regtiled):
            return False
        return not self.register_tiled(choice) or self.tile_vectors(choice) <= registers

    def sample(self, rng: random.Random) -> Choice:
        for _ in range(32):
            c = {name: rng.choice(choices) for name, choices in self.decisions}
            # the register-tiled sketch is the one that can be fast (Ansor's multi-level tiling):
            # drawn uniformly it was one in three, and a ResNet-18 conv's 80 trials never saw it
            if rng.random() < REGISTER_SKETCH_SHARE:
                if self.out.op.reduce_axis:
                    c["cache_write"] = True
                elif self.anchor is not None:
                    c[f"place:{self.anchor.name}"] = "register"
                # the producers' reductions too (Ansor tiles every reduction stage)
                for t in self.regtiled:
                    c[f"regtile:{t.name}"] = True
            if self._fits(c):
                return c
        return c

    def mutate(self, choice: Choice, rng: random.Random) -> Choice:
        options = [(n, c) for n, c in self.decisions if len(c) > 1]
        if not options:
            return dict(choice)
        for _ in range(32):
            name, choices = rng.choice(options)
            new = dict(choice)
            new[name] = rng.choice([c for c in choices if c != choice.get(name)])
            if self._fits(new):
                return new
        return new

    def family(self) -> tuple:
        """The decisions' names but the ``unroll:`` ones (which come and go with the sizes of a
        padding or bias axis): tasks with the same family (the convs of one kind in a network, at
        other sizes) can take each other's choices through ``adapt``."""
        return tuple(sorted(name for name, _ in self.decisions if not name.startswith("unroll:")))

    def adapt(self, choice: Choice) -> Optional[Choice]:
        """``choice`` (from another task of the same family) as a choice of this space: a value this
        space offers is kept, a number it does not offer becomes the nearest one it does (a tile
        of 14 on a 7-wide map becomes 7), anything else its first option; None if the result
        breaks the register budget."""
        out = {}
        for name, options in self.decisions:
            value = choice.get(name)
            if value in options:
                out[name] = value
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and \
                    all(isinstance(o, int) and not isinstance(o, bool) and o > 0 for o in options):
                out[name] = min(options, key=lambda o: (abs(math.log(o / value)), o))
            else:
                out[name] = options[0]
        return out if self._fits(out) else None

    def crossover(self, a: Choice, b: Choice, rng: random.Random) -> Choice:
        return {n: (a if rng.random() < 0.5 else b).get(n) for n, _ in self.decisions}

    def size(self) -> int:
        n = 1
        for _, c in self.decisions:
            n *= len(c)
        return n

    # -- building ------------------------------------------------------------
    def apply(self, choice: Choice):
        """A Schedule for ``choice``; raises ScheduleError where the schedule API refuses it."""
        s = create_schedule(self.task.outputs)
        out = self.out
        anchored = self.register_tiled(choice)
        skip = {id(t.op) for t in self.epilogue} | ({id(self.anchor.op)} if self.anchor is not None else set())
        if anchored and self.anchor is not None:
            for t in self.epilogue:
                s[t].compute_inline()
        at_tile, at_root, at_outer = [], [], []
        for t in self.producers:
            if anchored and id(t.op) in skip:
                continue
            place = choice.get(f"place:{t.name}", "root")
            if place == "inline":
                s[t].compute_inline()
                continue
            stages = [t]
            loops = None            # a register-tiled producer's tile loops (its parallel candidates)
            if choice.get(f"regtile:{t.name}"):          # before an rfactor offered beside it
                loops = self._register_tile(s, t, choice)
            elif choice.get(f"rfactor:{t.name}"):
                stages.insert(0, self._vectorized_partials(s, t))
            else:
                self._vectorize_inner(s, t)
                short = _short_axis(t) if choice.get(f"unroll:{t.name}") else None
                if short is not None:
                    s[t].unroll(s[t].op.axis[short])
            if place in ("tile", "register"):
                at_tile.extend(stages)
            elif place == "outer":
                at_outer.extend(stages)
            else:
                at_root.extend((st, loops) for st in stages)
        for t, loops in at_root:
            self._parallel_outer(s, t, loops)
        if choice.get(f"rfactor:{out.name}"):
            self._factored_output(s, int(choice.get(f"rfactor_parts:{out.name}", 1)))
            for t in at_tile + at_outer:       # the output has no tile loops then: they run at root
                self._parallel_outer(s, t)
            return s

        C = s[out.op]
        cw = anchored and bool(out.op.reduce_axis)
        CC = s.cache_write(out, "local") if cw else None
        pack = choice.get("pack")
        BB = None
        reduction = out if out.op.reduce_axis else self.anchor
        reader = (CC.op if cw else self.anchor.op) if anchored else None     # the anchor's product
        if anchored and choice.get(f"pack_t:{reduction.name}"):
            transposed = _transposable(reader.output(0))
            self._pack_transposed(s, reader, *transposed)
            if pack == transposed[0]:
                pack = None
        if pack is not None and anchored:
            BB = s.cache_read(reader.input_tensors[pack], "local", [reader])
        axes = list(C.op.axis)
        reds = list(C.op.reduce_axis)
        tail = "guard" if reds else "shift"
        outer, inner = [], []
        for ax in axes[:-1]:
            f = int(choice.get(f"tile:{ax.var.name}", 1))
            if f > 1:
                o, i = C.split(ax, factor=f, tail=tail)
                outer.append(o)
                inner.append(i)
            else:
                outer.append(ax)
        jo, ji = C.split(axes[-1], factor=int(choice["nr"]), tail=tail)
        rows_outer = list(outer)
        lead = choice.get("lead")
        if lead not in (None, "natural"):
            k = next(i for i, ax in enumerate(axes[:-1]) if ax.var.name == lead)
            outer = [outer[k]] + outer[:k] + outer[k + 1:]
        outer = [jo] + outer if choice.get("order") == "cols_outer" else outer + [jo]
        kloops = []
        if reds:
            ks = int(choice.get("ksplit") or 0)
            if ks:
                ko, ki = C.split(reds[0], factor=ks)
                kloops = [ko] + reds[1:] + [ki]
            else:
                kloops = reds
        C.reorder(*outer, *kloops, *inner, ji)
        C.vectorize(ji)
        # unrolled, the output's tile reads an anchor's register tile at constant indices, which
        # keeps the accumulators in registers (a loop over them would leave them in memory)
        if choice.get("unroll_rows") and not reds:
            for i in inner:
                C.unroll(i)
        # the row tile: the outer loop of the axis before the columns (the loop producers at
        # "tile" are computed in; at a column loop inside it they would be recomputed per column tile)
        row_loop = rows_outer[-1] if rows_outer else jo
        outer = self._parallelize(C, outer, choice.get("parallel"))
        fused = outer[0] if choice.get("parallel") in ("outer", "fuse2") else None
        if fused is not None and all(row_loop is not o for o in outer):
            row_loop = fused
        inner_at = outer[-1]
        if anchored:
            A = s[CC.op] if cw else s[self.anchor]
            A.compute_at(C, inner_at)
            _accumulate_in_tile(A, [int(choice.get(f"tile:{o.var.name}", 1)) for o in out.op.axis[:-1]],
                                choice.get("tile_order") == "reversed", bool(choice.get("unroll_rows")))
        if BB is not None:
            s[BB.op].compute_at(C, outer[0])
            # vectors of `lanes` elements: the packed region's width is only known after bound
            # inference, and a whole-dimension vector can be thousands of lanes wide
            _, pv = s[BB.op].split(s[BB.op].op.axis[-1], factor=self.task.target.lanes(out.dtype))
            s[BB.op].vectorize(pv)
        rows_at = row_loop if len(axes) >= 2 else inner_at
        for t in at_tile:
            s[t].compute_at(C, rows_at)
        for t in at_outer:
            s[t].compute_at(C, outer[0])
        return s

    def _register_tile(self, s, t, choice: Choice) -> list:
        """A reduction producer accumulated in registers, as the output is: a ``cache_write``
        accumulator computed at the innermost of its tile loops, the reduction outside the tile,
        the tile's rows unrolled and its last axis (or ``nr:`` columns of it) in vectors; returns the
        tile loops."""
        P = s[t]
        acc = s.cache_write(t, "local")
        if choice.get(f"pack_t:{t.name}"):
            self._pack_transposed(s, acc.op, *_transposable(acc))
        axes = list(P.op.axis)
        factors = [int(choice.get(f"tile:{t.name}.{ax.var.name}", 1)) for ax in axes[:-1]]
        outer, inner, single = [], [], []
        for ax, f in zip(axes[:-1], factors):
            if f > 1:
                o, i = P.split(ax, factor=f, tail="shift")
                outer.append(o)
                inner.append(i)
            else:
                outer.append(ax)
                single.append(ax)
        if choice.get(f"singles_first:{t.name}"):
            outer = single + [o for o in outer if all(o is not x for x in single)]
        cols = axes[-1]
        nr = int(choice.get(f"nr:{t.name}", 0))
        if 0 < nr < (const_int(cols.extent) or 0):
            jo, cols = P.split(cols, factor=nr, tail="shift")
            outer.append(jo)
        P.reorder(*outer, *inner, cols)
        P.vectorize(cols)
        A = s[acc]
        A.compute_at(P, outer[-1])
        _accumulate_in_tile(A, factors, choice.get(f"tile_order:{t.name}") == "reversed", True)
        return outer

    def _pack_transposed(self, s, reader, pos: int, lane_dim: int) -> None:
        """A copy of ``reader``'s input ``pos`` computed at root and stored with ``lane_dim`` (the
        dimension the reader's vectors run along) innermost: the register tile's strided loads of
        ``K[j, r]`` become vector loads of the copy's ``[r, j:j+lanes]``.  The copy's loops run in
        its storage order, its innermost in vectors, its outermost in parallel."""
        copy = s.cache_read(reader.input_tensors[pos], "local", [reader.output(0)])
        P = s[copy]
        axes = list(P.op.axis)
        order = [a for d, a in enumerate(axes) if d != lane_dim] + [axes[lane_dim]]
        P.reorder_storage(*order)
        P.reorder(*order)
        if (const_int(order[-1].extent) or 0) >= self._lanes(copy):
            _, vi = P.split(order[-1], factor=self._lanes(copy))
            P.vectorize(vi)
        self._parallel_outer(s, copy, order[:1])

    def _parallelize(self, C, outer: list, mode) -> list:
        """Fuse the leading outer loops and run them in parallel: "outer" through the first loop
        of more than one iteration (a batch of 1 adds nothing), "fuse2" one loop more."""
        if mode not in ("outer", "fuse2") or not outer:
            return outer
        n = 0
        while n < len(outer) - 1 and (const_int(outer[n].extent) or 2) <= 1:
            n += 1
        n += 1
        if mode == "fuse2" and n < len(outer):
            n += 1
        if n > 1:
            outer = [C.fuse(*outer[:n])] + outer[n:]
        C.parallel(outer[0])
        return outer

    # -- producer stages -----------------------------------------------------
    def _lanes(self, t) -> int:
        return self.task.target.lanes(t.dtype)

    def _vectorize_inner(self, s, t) -> None:
        """An elementwise producer's last axis in vectors; reductions keep their order."""
        st = s[t]
        if t.op.reduce_axis or not st.op.axis:
            return
        last = st.op.axis[-1]
        lanes = self._lanes(t)
        if (const_int(last.extent) or 0) >= lanes:
            _, vi = st.split(last, factor=lanes)
            st.vectorize(vi)

    def _vectorized_partials(self, s, t):
        """rfactor the reduction into ``lanes`` partial results computed as vectors.

        ``t[i] = red_k f(i, k)`` becomes ``rf[i, l] = red_ko f(i, ko*lanes + l)`` with ``l``
        vectorized innermost, then ``t[i] = red_l rf[i, l]``: a row reduction whose serial
        dependence chain was one scalar per element becomes one vector per ``lanes`` elements.
        """
        lanes = self._lanes(t)
        st = s[t]
        k = st.op.reduce_axis[0]
        _, ki = st.split(k, factor=lanes)
        rf = s.rfactor(t, ki, factor_axis=len(st.op.axis))
        rs = s[rf]
        rs.reorder(*rs.op.axis[:-1], *rs.op.reduce_axis, rs.op.axis[-1])
        rs.vectorize(rs.op.axis[-1])
        return rf

    def _factored_output(self, s, parts: int) -> None:
        """The output's reduction as ``parts`` parallel chunks of ``lanes`` vector partial results.

        ``out[i] = sum_k f(i, k)`` becomes ``rf[p, i, l] = sum_ko f(i, (p * K/parts) + ko * lanes + l)``
        (``l`` vectorized innermost, the leading whole axes fused and run in parallel), then two
        short reductions: over ``l`` and over ``p``.  With ``parts`` 1 there is no ``p`` and the rows
        run in parallel: enough for a row sum of many rows; a full sum needs the parts."""
        out = self.out
        src = out
        if parts > 1:
            chunk, _ = s[out].split(s[out].op.reduce_axis[0], nparts=parts)
            src = s.rfactor(out, chunk, factor_axis=0)
        S = s[src]
        _, ki = S.split(S.op.reduce_axis[0], factor=self.lanes)
        rf = s.rfactor(src, ki, factor_axis=len(S.op.axis))
        R = s[rf]
        R.reorder(*R.op.axis[:-1], *R.op.reduce_axis, R.op.axis[-1])
        R.vectorize(R.op.axis[-1])
        self._parallel_outer(s, rf)

    def _parallel_outer(self, s, t, loops=None) -> None:
        """A producer computed at root runs its outer loops in parallel, fused through the first of
        more than one point (a batch of 1 alone runs serially): ``loops`` (a register tile's), else
        its leading loops that are still whole axes."""
        st = s[t]
        if loops is None:
            loops = []
            for v, ax in zip(st.leaf_iter_vars, st.op.axis):
                if v is not ax:
                    break
                loops.append(v)
        if any((const_int(v.extent) or 2) > 1 for v in loops):
            self._parallelize(st, loops, "outer")
