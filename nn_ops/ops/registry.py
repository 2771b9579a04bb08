"""Default schedules: a table from (op tag, target kind) to a schedule function.

Ops tag their compute (``ComputeOp.tag``); ``schedule(outputs, target)`` creates a
schedule, inlines elementwise stages and applies the registered schedule of every
tagged stage.  Schedule functions are plain functions ``(s, op, target) -> None``
over the public schedule API, readable as examples of how to schedule.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from ...dsl.expr import Const
from ...dsl.schedule import Schedule, create_schedule
from ...dsl.tensor import ComputeOp, Tensor
from ...target import resolve_target

_SCHEDULES: Dict[Tuple[str, str], Callable] = {}

INJECTIVE_TAGS = ("elemwise", "broadcast", "injective")


def register_schedule(tag: str, target_kind: str = "llvm"):
    def decorate(fn: Callable) -> Callable:
        _SCHEDULES[(tag, target_kind)] = fn
        return fn
    return decorate


def schedule(outputs, target="llvm") -> Schedule:
    """A schedule for ``outputs`` with every op's default schedule for ``target`` applied."""
    tgt = resolve_target(target)
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    s = create_schedule(outs)
    out_ops = {id(t.op) for t in outs}
    for stage in list(s.stages):
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue
        if op.tag in INJECTIVE_TAGS and id(op) not in out_ops:
            stage.compute_inline()
    for stage in list(s.stages):
        op = stage.origin_op
        if not isinstance(op, ComputeOp) or stage.attach_type == "inline":
            continue
        fn = _SCHEDULES.get((op.tag, tgt.kind))
        if fn is not None:
            fn(s, op, tgt)
        elif id(op) in out_ops and op.tag in INJECTIVE_TAGS and getattr(stage, "fused_anchor", None) is None:
            schedule_injective(s, op, tgt)
    return s


def fused_output(s: Schedule, op: ComputeOp):
    """The stage an anchor op's schedule (conv, dense, matmul) should tile.

    Usually ``s[op]``.  When ``op`` is not an output but feeds the schedule's single
    output only through elementwise stages that are inlined (a fused epilogue: bias add,
    residual add, relu, clip), it is that output's stage: the anchor's schedule tiles the
    output and computes ``op`` inside the tile, so the epilogue costs no extra pass over
    memory.  The output stage is then marked (``stage.fused_anchor``) so that ``schedule``
    does not give it the injective schedule as well.
    """
    own = s[op]
    if any(o is op for o in s.outputs) or len(s.outputs) != 1:
        return own
    final_op = s.outputs[0]
    final = s[final_op]
    if not isinstance(final_op, ComputeOp) or final_op.tag not in INJECTIVE_TAGS or final_op.reduce_axis:
        return own
    if [str(d) for d in final_op.outputs[0].shape] != [str(d) for d in op.outputs[0].shape]:
        return own
    if not _reaches_through_inlined(s, final_op, op):
        return own
    if getattr(final, "fused_anchor", None) not in (None, op):
        return own
    final.fused_anchor = op
    return final


def accumulator_and_tile(s: Schedule, op: ComputeOp):
    """``(accumulator tensor, stage to tile)`` for a register-blocked anchor op.

    Without a fused epilogue the op's own stage is tiled and accumulates its block in a
    ``cache_write`` local buffer; with one (see ``fused_output``) the epilogue's output
    stage is tiled and ``op`` itself, computed inside the tile, is the accumulator.
    """
    final = fused_output(s, op)
    if final is s[op]:
        return s.cache_write(op.outputs[0], "local"), s[op]
    return op.outputs[0], final


def unroll_long_epilogue(s: Schedule, op: ComputeOp, tile, axes) -> None:
    """Unroll the loops ``axes`` of ``tile`` (the stage an anchor ``op`` is computed in) when its
    epilogue calls math functions (exp, tanh, erf: a sigmoid, SiLU or GELU).  LLVM keeps such a
    long body as a loop; the accumulator, then indexed by a variable, lived in memory through the
    whole reduction (GPT-2's dense + tanh GELU took 2.2x the dense's time).  Cheap epilogues
    (bias, ReLU, clip, a residual add) are left to LLVM, which unrolls them itself: unrolling them
    here cost ~40 % more compile time per conv kernel for no measurable speed."""
    if tile.op is op or not _epilogue_calls_math(s, tile.op, op):
        return
    for axis in axes:
        tile.unroll(axis)


def _epilogue_calls_math(s: Schedule, final: ComputeOp, anchor: ComputeOp) -> bool:
    from ...dsl.expr import Call
    from ...dsl.visitor import post_order_visit
    found = []
    stack, seen = [final], set()
    while stack:
        cur = stack.pop()
        if id(cur) in seen or cur is anchor or not isinstance(cur, ComputeOp):
            continue
        seen.add(id(cur))
        for b in cur.body:
            post_order_visit(b, lambda n: found.append(n) if isinstance(n, Call) else None)
        stack.extend(t.op for t in cur.input_tensors if t.op is not anchor and s[t.op].attach_type == "inline")
    return bool(found)


def accumulate_in_registers(s: Schedule, acc: Tensor, host, at, order, unrolled) -> None:
    """Compute the accumulator ``acc`` inside ``host``'s loop ``at`` as a register block: its
    loops in ``order`` (the reduction outside the block, the vector axis last), the block's
    ``unrolled`` axes copied out, the last axis vectorized."""
    A = s[acc]
    A.compute_at(host, at)
    A.reorder(*order)
    for axis in unrolled:
        A.unroll(axis)
    A.vectorize(order[-1])


def _reaches_through_inlined(s: Schedule, consumer: ComputeOp, producer) -> bool:
    """Whether ``consumer`` reads ``producer``, directly or through inlined stages only."""
    found = False
    for t in consumer.input_tensors:
        if t.op is producer:
            found = True
        elif isinstance(t.op, ComputeOp):
            stage = s[t.op]
            if stage.attach_type != "inline":
                if _depends_on(t.op, producer):
                    return False     # another materialised stage lies between them
                continue
            if _reaches_through_inlined(s, t.op, producer):
                found = True
            elif _depends_on(t.op, producer):
                return False
    return found


def _depends_on(op, producer) -> bool:
    stack, seen = [op], set()
    while stack:
        cur = stack.pop()
        if cur is producer:
            return True
        if id(cur) in seen or not isinstance(cur, ComputeOp):
            continue
        seen.add(id(cur))
        stack.extend(t.op for t in cur.input_tensors)
    return False


def compute_all_at(s: Schedule, tensors, host, axis) -> None:
    """``compute_at(host, axis)`` for each of ``tensors``, readers before what they read.

    A stage may only move inside a loop once every stage reading it is there, so a
    producer chain (mean -> var -> output) is attached from the output end.
    """
    stages = list(dict.fromkeys(s[t] for t in tensors))

    def read_stages(stage) -> set:
        """The stages ``stage`` reads now (rfactor retargets a stage to an op that reads its
        partials), looking through inlined stages (their reads happen in the reader)."""
        found = set()
        for t in stage.op.input_tensors:
            if not isinstance(t.op, ComputeOp):
                continue
            producer = s[t]
            found |= read_stages(producer) if producer.attach_type == "inline" else {id(producer)}
        return found
    reads = {id(st): read_stages(st) for st in stages}
    pending = stages
    while pending:      # a stage goes when no pending stage still reads it
        ready = [st for st in pending if not any(id(st) in reads[id(r)] for r in pending if r is not st)]
        if not ready:
            raise ValueError("compute_all_at: the stages read each other in a cycle")
        for st in ready:
            st.compute_at(host, axis)
        pending = [st for st in pending if all(st is not r for r in ready)]


def vectorized_reduction(s: Schedule, stat: Tensor, lanes: int):
    """Split ``stat``'s single reduction axis by ``lanes`` and factor the lanes out (rfactor),
    so the reduction accumulates whole vectors; returns the partial-results tensor."""
    stage = s[stat]
    n_axes = len(stat.op.axis)
    _, ki = stage.split(stat.op.reduce_axis[0], factor=lanes)
    partial = s.rfactor(stat, ki, factor_axis=n_axes)
    p_axes = list(s[partial].leaf_iter_vars)               # spatial..., lanes, outer reduction
    s[partial].reorder(*p_axes[:n_axes], p_axes[-1], p_axes[n_axes])
    s[partial].vectorize(p_axes[n_axes])
    return partial


def _unblocked_source(s: Schedule, op: ComputeOp):
    """The channel block of a ``from_blocked`` (NCHW[b]c -> NCHW) that ``op`` is, or reads
    through inlined elementwise stages at its own shape; None if there is none."""
    found = _inlined_source(s, op, "unblocks")
    return None if found is None else int(found)


def _inlined_source(s: Schedule, op: ComputeOp, attr: str):
    """The attribute ``attr`` of ``op``, or of an op that ``op`` reads through inlined injective
    stages at its own shape (a layout transform under an epilogue); None if there is none."""
    shape = [getattr(d, "value", d) for d in op.outputs[0].shape]
    stack, seen = [op], set()
    while stack:
        cur = stack.pop()
        if id(cur) in seen or not isinstance(cur, ComputeOp):
            continue
        seen.add(id(cur))
        if cur is not op and s[cur].attach_type != "inline":
            continue
        if cur.attrs.get(attr) and [getattr(d, "value", d) for d in cur.outputs[0].shape] == shape:
            return cur.attrs[attr]
        if cur.tag in INJECTIVE_TAGS:
            stack.extend(t.op for t in cur.input_tensors)
    return None


def _transpose_tile(lanes: int, limit: int, divides: int = 0) -> int:
    """The side of a square tile transposed in registers: the widest of the vector width, 8 and 4
    that is at most ``limit`` (and divides ``divides``, where given), or 0 if none is."""
    return max((t for t in (lanes, 8, 4) if t <= min(lanes, limit) and not (divides and divides % t)), default=0)


def _schedule_transposed(stage, axes, perm, lanes: int) -> bool:
    """A transpose (maybe under an epilogue) whose last output axis is not the input's last: tiles of
    T x T (T the vector width, else 8 or 4, at most both axes' extents) of the output's last axis
    and of the axis that reads the input's last, that one transposed in registers (the pragma
    ``"transpose"``): each output vector is a column of T input rows read whole, where the generic
    schedule gathered it element by element; the other axes and both tile loops fused in parallel
    (as far as their index comes apart by constants).  A last axis of symbolic extent takes whole
    tiles plus a last, masked one.  False (nothing done) where the axis that reads the input's last
    is not a constant extent of at least 4, or the last one a constant below 4."""
    nd = len(axes)
    last = nd - 1
    if len(perm) != nd or perm[last] == last:
        return False
    a = list(perm).index(last)
    extents = [ax.extent.value if isinstance(ax.extent, Const) else 0 for ax in (axes[a], axes[last])]
    symbolic = not extents[1]       # a row of run-time length (a shape-polymorphic K transpose over seq)
    tile = _transpose_tile(lanes, min(extents[0], extents[1] or lanes))
    if not tile:
        return False
    ao, ai = stage.split(axes[a], factor=tile, tail="shift" if extents[0] % tile else "guard")
    lo, li = stage.split(axes[last], factor=tile, tail="guard" if symbolic or not extents[1] % tile else "shift")
    outer = [ax for k, ax in enumerate(axes) if k not in (a, last)] + [ao, lo]
    stage.reorder(*outer, ai, li)
    outer = outer[:constant_divisor_prefix(outer)]
    stage.parallel(stage.fuse(*outer) if len(outer) > 1 else outer[0])
    stage.vectorize(li)
    stage.pragma(ai, "transpose")
    if symbolic:        # the last tile of a row: one masked vector (lowering/passes/pad_tail_tiles.py)
        stage.pragma(lo, "pad_tails")
    return True


#: pixels of one ``to_blocked`` tile (times the block's channels): 8 x 16 measured fastest of 4-16
#: (``python -m benchmarks.transposes``)
TO_BLOCKED_PIXELS = 8


#: a plane-by-plane op of symbolic height (``parallel_planes_and_rows`` given ``threads``) runs each
#: plane's rows in order inside one task where its channel blocks give each thread at least these many
#: planes: row by row across the blocks, every row read its input rows from L2 and started a new
#: memory stream (MobileNetV2's 960-channel depthwise layers at 7x7 31.7 -> 9.8 us, 576 at 14x14
#: 52 -> 20; ``exe.profile`` in a network, one thread)
PLANES_PER_THREAD = 4


def parallel_planes_and_rows(stage, n, cb, y, inner, threads: int = 0):
    """Loops (image, channel block, row, ``inner``...) with the first three fused and in parallel
    (returned: a producer computed per row attaches there).
    With a symbolic height (a shape-polymorphic kernel) rows go outside the channel blocks and only
    (row, block) are fused, the images staying a serial loop outside: a fused index is taken apart
    by dividing by the inner extents, which must be constants to stay cheap and affine.  Given the
    ``threads`` and at least ``PLANES_PER_THREAD`` channel blocks a thread, (image, block) are fused
    and in parallel instead, the rows a serial loop inside each (returned)."""
    if isinstance(y.extent, Const):
        stage.reorder(n, cb, y, *inner)
        fused = stage.fuse(n, cb, y) if y.extent.value > 1 else stage.fuse(n, cb)
    elif threads and isinstance(cb.extent, Const) and cb.extent.value >= PLANES_PER_THREAD * threads:
        stage.reorder(n, cb, y, *inner)
        stage.parallel(stage.fuse(n, cb))
        return y
    else:
        stage.reorder(n, y, cb, *inner)
        fused = stage.fuse(y, cb)
    stage.parallel(fused)
    return fused


def _schedule_to_blocked(stage, axes, lanes: int) -> None:
    """``to_blocked`` (NCHW -> NCHW[b]c): (image, channel block, row) in parallel, then tiles of
    the block's channels x as many pixels, read as ``b`` rows of pixels and transposed in
    registers (the pragma ``"transpose"``, ``backends/llvm/transpose.py``) where a row has at
    least ``b`` pixels and ``b`` is the vector width; else tiles of ``TO_BLOCKED_PIXELS`` pixels
    x the block's channels, both unrolled, which LLVM's SLP vectorizer turns into row loads and
    shuffles.  The generic schedule vectorized the channel axis, a gather from ``b`` planes per
    vector: 144 channels at 56x56 took 160-195 us, SLP tiles 78-97 (Zen 4, 2 threads,
    interleaved; a plain copy of the same bytes, one thread: 40 us).  A row that does not split
    into whole tiles takes tiles of its plane instead (``_plane_tiles``)."""
    n, cb, y, x, ci = axes
    width = x.extent.value if isinstance(x.extent, Const) else 0
    block = ci.extent.value if isinstance(ci.extent, Const) else 0
    if block == lanes and _plane_tiles(stage, n, cb, y, x, ci, block, channels_outer=False):
        return
    if block == lanes and width >= block:
        x, xi = stage.split(x, factor=block, tail="shift")
        parallel_planes_and_rows(stage, n, cb, y, [x, xi, ci])
        stage.vectorize(ci)
        stage.pragma(xi, "transpose")
        return
    inner = [ci]
    loops = [x, ci]
    if width > TO_BLOCKED_PIXELS:
        x, xi = stage.split(x, factor=TO_BLOCKED_PIXELS, tail="shift")
        loops = [x, xi, ci]
        inner = [xi, ci]
    elif 0 < width:
        inner = [x, ci]
    parallel_planes_and_rows(stage, n, cb, y, loops)
    for axis in inner:
        stage.unroll(axis)


def _plane_tiles(stage, n, cb, y, x, channels, tile: int, channels_outer: bool) -> bool:
    """Where a row of ``x`` does not split into whole tiles of ``tile`` pixels (14 or 17 wide) but a
    plane does hold one (constant height and width): the plane's rows fused into one axis of pixels
    (contiguous in both layouts; the simplifier takes the fused index apart again), split into tiles
    with the last one shifted back; (image, channel block, tile) fused in parallel, then the tile's
    pixels and ``channels`` (``channels_outer``: channels first, as ``from_blocked`` stores a vector
    of pixels per channel), the inner one vectorized and the outer transposed in registers (the
    pragma ``"transpose"``).  By rows, a 14-pixel row took two tiles of 8 (to_blocked) or four of 4
    (from_blocked).  False (nothing done) where a row splits into whole tiles or a plane is smaller."""
    if not (isinstance(x.extent, Const) and isinstance(y.extent, Const)):
        return False
    width, height = x.extent.value, y.extent.value
    if not width % tile or width * height < tile:
        return False
    po, pi = stage.split(stage.fuse(y, x), factor=tile, tail="shift" if width * height % tile else "guard")
    outer, inner = (channels, pi) if channels_outer else (pi, channels)
    stage.reorder(n, cb, po, outer, inner)
    stage.parallel(stage.fuse(n, cb, po))
    stage.vectorize(inner)
    stage.pragma(outer, "transpose")
    return True


#: pixels of one ``from_blocked`` tile: 4, or 8 on rows at least ``FROM_BLOCKED_WIDE`` wide
FROM_BLOCKED_PIXELS, FROM_BLOCKED_WIDE = 4, 64


def _schedule_from_blocked(stage, axes, block: int, lanes: int) -> None:
    """``from_blocked`` (NCHW[b]c -> NCHW, maybe under an epilogue): (image, channel block, row) in
    parallel, then tiles of a few pixels x the block's channels.  Where a row has at least 4
    pixels: the tile's pixels (up to the vector width) are one vector per channel, read as rows of
    channels and transposed in registers (the pragma ``"transpose"``,
    ``backends/llvm/transpose.py``).  Else channels outer and pixels, both unrolled, so each
    channel's pixels are stored as one short vector (SLP makes the loads gathers of one lane from
    each pixel's vector); against one pixel at a time, its ``b`` channels stored one by one (Zen 5,
    2 threads, interleaved): 16 blocks at 13x13 1.14-1.41x, 4 at 56x56 1.07-1.29x, 8 at 28x28
    1.2x, 4 at 112x112 1.25x.  A row that does not split into whole tiles of the vector width (or of
    the block) takes tiles of its plane instead (``_plane_tiles``)."""
    n, c, y, x = axes
    co, ci = stage.split(c, factor=block)
    width = x.extent.value if isinstance(x.extent, Const) else 0
    pixels = _transpose_tile(lanes, lanes, block)
    if pixels and _plane_tiles(stage, n, co, y, x, ci, pixels, channels_outer=True):
        return
    pixels = _transpose_tile(lanes, width or lanes, block)
    if pixels:
        x, xi = stage.split(x, factor=pixels, tail="shift" if width % pixels else "guard")
        parallel_planes_and_rows(stage, n, co, y, [x, ci, xi])
        stage.vectorize(xi)
        stage.pragma(ci, "transpose")
        if not width:       # a row of run-time width: its last tile one masked vector (pad_tail_tiles)
            stage.pragma(x, "pad_tails")
        return
    tile = TO_BLOCKED_PIXELS if width >= FROM_BLOCKED_WIDE else FROM_BLOCKED_PIXELS
    inner = [ci]
    if width > tile:
        x, xi = stage.split(x, factor=tile, tail="shift")
        inner = [ci, xi]
    parallel_planes_and_rows(stage, n, co, y, [x, *inner])
    for axis in inner:
        stage.unroll(axis)


def schedule_injective(s: Schedule, op: ComputeOp, target) -> None:
    """Fuse the outer axes into one parallel loop, vectorize the innermost axis.

    An NCHW result of a blocked NCHW[b]c tensor (``from_blocked``, maybe under an epilogue)
    instead runs (image, channel block, row) in parallel, then pixels, then the ``b``
    channels of a block unrolled: whole input vectors read in order, and no per-element
    division of a fused index (3-10x faster than the flat loop at 14x14 - 56x56)."""
    stage = s[op]
    axes = list(stage.leaf_iter_vars)
    if not axes:
        return
    lanes = target.lanes(op.outputs[0].dtype)
    if op.attrs.get("blocks") and len(axes) == 5 and axes == list(op.axis):
        _schedule_to_blocked(stage, axes, lanes)
        return
    block = _unblocked_source(s, op) if len(axes) == 4 and axes == list(op.axis) else None
    if block:
        _schedule_from_blocked(stage, axes, block, lanes)
        return
    perm = _inlined_source(s, op, "perm") if axes == list(op.axis) else None
    if perm and _schedule_transposed(stage, axes, perm, lanes):
        return
    axes = _merge_short_trailing_axes(stage, axes, lanes)
    inner = axes[-1]
    # a row of run-time width (a shape-polymorphic map): whole vectors, the last one masked
    # (lowering/passes/pad_tail_tiles.py), not one scalar per element
    symbolic = not isinstance(inner.extent, Const) and target.kind == "llvm"
    if symbolic or (isinstance(inner.extent, Const) and inner.extent.value >= lanes):
        outer, vec = stage.split(inner, factor=lanes)
        stage.vectorize(vec)
        if symbolic:
            stage.pragma(outer, "pad_tails")
        ragged = not symbolic and inner.extent.value % lanes
        # a row that ends in a partial vector keeps its vectors in a serial loop of its own, where the
        # rows give the threads enough to share: the last one is then split off whole (loop_partition);
        # fused into the parallel loop, every element would test a guard and none would be vectorized
        rows = const_product(a.extent for a in axes[:-1]) or 0
        axes = axes[:-1] + ([] if ragged and rows >= 4 * max(1, target.num_threads) else [outer])
    axes = axes[:constant_divisor_prefix(axes)]
    if too_little_to_share(op.outputs[0].shape, ELEMENT_WORK) or not axes:
        return
    per_iteration = const_product(a.extent for a in stage.leaf_iter_vars if a not in axes)
    parallel_unless_little(stage, stage.fuse(*axes) if len(axes) > 1 else axes[0],
                           per_iteration and per_iteration * ELEMENT_WORK)


def _merge_short_trailing_axes(stage, axes, lanes: int) -> list:
    """``axes`` with the innermost fused to the one before while it is shorter than a vector (constant
    extents): a [.., 14, 14] copy then runs vectors along rows of 196, where it ran element by element
    with a division per index (ShuffleNetV2's channel shuffle, a transpose of [2, 116, 14, 14] that
    keeps the last two axes: 57 -> 4 us).  Where the fused axes are contiguous in the input too, the
    simplifier takes the fused index apart again into one ramp."""
    while len(axes) > 1 and all(isinstance(a.extent, Const) for a in axes[-2:]) and axes[-1].extent.value < lanes:
        axes = axes[:-2] + [stage.fuse(axes[-2], axes[-1])]
    return axes


#: a kernel of less work than this (in multiply-adds) runs on one thread: waking the pool's workers
#: costs more than the work (an LSTM of 64 units at batch 1: 0.75x -> 1.57x onnxruntime's speed).
#: Re-measure: ``python -m benchmarks.recurrent`` and ``python -m benchmarks.network``.
SERIAL_WORK = 32768
#: the work of one value of an elementwise kernel, in multiply-adds (a rough mean: a copy is less, an
#: activation's exp or tanh more)
ELEMENT_WORK = 16


def const_product(extents):
    """The product of ``extents``, or None if one of them is symbolic."""
    total = 1
    for e in extents:
        if not isinstance(e, Const):
            return None
        total *= e.value
    return total


def too_little_to_share(shape, per_element: int) -> bool:
    """Whether a kernel of ``shape`` with ``per_element`` multiply-adds per value is too small to split
    across threads (``SERIAL_WORK``); symbolic sizes never are."""
    total = const_product(shape)
    return total is not None and total * per_element < SERIAL_WORK


def parallel_unless_little(stage, axis, work_per_iteration) -> None:
    """``axis`` parallel; where its extent is a run-time size and each iteration costs a constant
    ``work_per_iteration`` multiply-adds, the loop runs on the calling thread below ``SERIAL_WORK`` in
    all (the pragma ``serial_below``, backends/llvm/codegen.py): the shape-polymorphic encoder's
    one-token attention products (4 heads x 64 per batch) and head transposes paid ~1 us each to wake
    the pool, where the static compile of that shape runs them on one thread (``too_little_to_share``)."""
    stage.parallel(axis)
    if not isinstance(axis.extent, Const) and work_per_iteration:
        stage.pragma(axis, "serial_below", -(-SERIAL_WORK // int(work_per_iteration)))


def constant_divisor_prefix(axes) -> int:
    """How many outer axes to fuse into the parallel loop: up to the first axis after the outermost
    whose extent is symbolic.  Taking a fused index apart divides it by the extents of every fused
    axis but the first: by constants that is a multiply and a shift, by a run-time size an integer
    division per element (the encoder's K transpose to [batch, heads, 64, seq] with symbolic sizes
    took 123 us, 16x a transpose that keeps its last axis)."""
    n = 1
    while n < len(axes) and isinstance(axes[n].extent, Const):
        n += 1
    return n
