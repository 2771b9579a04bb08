"""The search space: one sketch per task, generated from the compute DAG alone.

A sketch is a list of named decisions, each with its legal choices (``Space.decisions``);
``Space.apply(choice)`` turns one assignment into a Schedule through the ordinary
schedule API, so the result carries its replayable trace.  The rules:

* elementwise producers: inlined, or computed at the output's tile, or at root, their last
  axis in vectors; producers with a reduction: computed at the output's row tile or at root;
  a long one-axis reduction (softmax's max and sum, layer norm's moments) may be ``rfactor``-ed
  into ``lanes`` vectorized partial results (``rfactor:NAME``); producers at root run their
  outer loop in parallel;
* the output stage is tiled in two levels over its last two spatial axes
  (``mr`` rows x ``nr`` columns, ``tail="shift"`` full tiles where legal), batch axes outside;
* a reduction output may accumulate in a ``cache_write`` buffer computed at the register
  tile (rows unrolled, columns vectorized, the reduction outside the block), and may pack
  one operand by ``cache_read`` computed at the column-panel loop;
* without an accumulator the reduction may be split and placed between the tile loops;
* outer loops fused (one or two levels) and run in parallel; inner columns vectorized.

A mutation is the same sketch with one decision changed (``Space.mutate``).
"""
from __future__ import annotations

import random
from typing import Dict, List, Tuple

from ..dsl.schedule import create_schedule
from ..dsl.tensor import PlaceholderOp
from .task import Task, compute_stages, const_int

Choice = Dict[str, object]


def _divisor_like(extent: int, options) -> list:
    return [o for o in options if o <= extent] or [extent]


def _row_reducible(t, lanes: int) -> bool:
    """A one-axis reduction long enough that ``lanes`` partial results pay (softmax's max/sum)."""
    reds = t.op.reduce_axis
    return len(reds) == 1 and (const_int(reds[0].extent) or 0) >= 4 * lanes and t.op.num_outputs == 1


class Space:
    def __init__(self, task: Task):
        self.task = task
        out = task.outputs[-1]
        self.out = out
        self.producers = [t for t in compute_stages(task.outputs) if t.op is not out.op]
        shape = [const_int(d) for d in out.shape]
        lanes = task.target.lanes(out.dtype)
        d: List[Tuple[str, list]] = []
        lanes_of = lambda t: task.target.lanes(t.dtype)
        for t in self.producers:
            if t.op.reduce_axis:
                d.append((f"place:{t.name}", ["tile", "root"]))
                if _row_reducible(t, lanes_of(t)):
                    d.append((f"rfactor:{t.name}", [True, False]))
            else:
                d.append((f"place:{t.name}", ["inline", "tile", "root"]))
        last = shape[-1] or 1
        d.append(("nr", _divisor_like(last, [lanes, 2 * lanes, 3 * lanes, 4 * lanes])))
        if len(shape) >= 2:
            rows = shape[-2] or 1
            d.append(("mr", _divisor_like(rows, [1, 2, 4, 6, 8, 12])))
            d.append(("order", ["cols_outer", "rows_outer"]))
        has_red = bool(out.op.reduce_axis)
        if has_red:
            d.append(("cache_write", [True, False]))
            packable = [i for i, t in enumerate(out.op.input_tensors)
                        if isinstance(t.op, PlaceholderOp) and len(t.shape) >= 2]
            d.append(("pack", [None] + packable))
            kext = const_int(out.op.reduce_axis[0].extent) or 1
            d.append(("ksplit", [0] + _divisor_like(kext, [4, 8, 16, 64, 256])))
        d.append(("parallel", ["outer", "fuse2", "none"]))
        d.append(("unroll_rows", [True, False]))
        self.decisions = d

    # -- sampling ------------------------------------------------------------
    def sample(self, rng: random.Random) -> Choice:
        return {name: rng.choice(choices) for name, choices in self.decisions}

    def mutate(self, choice: Choice, rng: random.Random) -> Choice:
        options = [(n, c) for n, c in self.decisions if len(c) > 1]
        if not options:
            return dict(choice)
        name, choices = rng.choice(options)
        new = dict(choice)
        new[name] = rng.choice([c for c in choices if c != choice.get(name)])
        return new

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
        inputs = list(out.op.input_tensors)
        at_tile, at_root = [], []
        for t in self.producers:
            place = choice.get(f"place:{t.name}", "root")
            if place == "inline":
                s[t].compute_inline()
                continue
            stages = [t]
            if choice.get(f"rfactor:{t.name}"):
                stages.insert(0, self._vectorized_partials(s, t))
            else:
                self._vectorize_inner(s, t)
            (at_tile if place == "tile" else at_root).extend(stages)
        for t in at_root:
            self._parallel_outer(s, t)
        C = s[out.op]
        cw = bool(choice.get("cache_write")) and bool(out.op.reduce_axis)
        CC = s.cache_write(out, "local") if cw else None
        pack = choice.get("pack")
        BB = None
        if pack is not None and cw:
            BB = s.cache_read(inputs[pack], "local", [s[CC.op] if False else CC.op])
        axes = list(C.op.axis)
        reds = list(C.op.reduce_axis)
        tail = "guard" if reds else "shift"
        nr = int(choice["nr"])
        jo, ji = C.split(axes[-1], factor=nr, tail=tail)
        batch = axes[:-2] if len(axes) >= 2 else []
        if len(axes) >= 2:
            io, ii = C.split(axes[-2], factor=int(choice["mr"]), tail=tail)
            outer = [jo, io] if choice.get("order") == "cols_outer" else [io, jo]
            inner = [ii, ji]
        else:
            outer, inner, ii = [jo], [ji], None
        kloops = []
        if reds:
            ks = int(choice.get("ksplit") or 0)
            if ks:
                ko, ki = C.split(reds[0], factor=ks)
                kloops = [ko] + reds[1:] + [ki]
            else:
                kloops = reds
        C.reorder(*batch, *outer, *kloops, *inner)
        C.vectorize(ji)
        if ii is not None and choice.get("unroll_rows") and not cw and not reds:
            C.unroll(ii)
        par = choice.get("parallel")
        outer_at, inner_at = outer[0], outer[-1]
        row_loop = outer[1] if len(axes) >= 2 and outer[0] is jo else outer[0]
        if par == "fuse2" and len(batch + outer) >= 2:
            fused = C.fuse(*batch, *outer)
            C.parallel(fused)
            outer_at = inner_at = row_loop = fused
        elif par in ("outer", "fuse2"):
            if batch:
                fused = C.fuse(*batch, outer[0])
                if row_loop is outer[0]:
                    row_loop = fused
                outer_at = fused
                if inner_at is outer[0]:
                    inner_at = fused
                C.parallel(fused)
            else:
                C.parallel(outer[0])
        if cw:
            A = s[CC.op]
            A.compute_at(C, inner_at)
            c_axes = list(A.op.axis)
            ck = list(A.op.reduce_axis)
            if len(c_axes) >= 2:
                A.reorder(*c_axes[:-2], *ck, c_axes[-2], c_axes[-1])
                if choice.get("unroll_rows"):
                    A.unroll(c_axes[-2])
            else:
                A.reorder(*ck, c_axes[-1])
            A.vectorize(c_axes[-1])
        if BB is not None:
            s[BB.op].compute_at(C, outer_at)
            # vectors of `lanes` elements: the packed region's width is only known after bound
            # inference, and a whole-dimension vector can be thousands of lanes wide
            _, pv = s[BB.op].split(s[BB.op].op.axis[-1], factor=self.task.target.lanes(out.dtype))
            s[BB.op].vectorize(pv)
        # producers go to the row-tile loop (io): at a column loop inside it they would be
        # recomputed once per column tile
        rows_at = row_loop if len(axes) >= 2 else inner_at
        for t in at_tile:
            s[t].compute_at(C, rows_at)
        return s

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

    def _parallel_outer(self, s, t) -> None:
        """A producer computed at root runs its outermost loop in parallel (when that loop is
        still a whole axis: a one-axis stage split into vectors keeps it serial)."""
        st = s[t]
        first = st.leaf_iter_vars[0] if st.leaf_iter_vars else None
        if first is not None and st.op.axis and first is st.op.axis[0] and (const_int(first.extent) or 0) > 1:
            st.parallel(first)
