"""distribute_warp_tiles: a "warp" buffer becomes tensor-core fragments, its loop nests warp instructions.

A stage in scope ``"warp"`` is a tile the 32 threads of a warp compute together on the
tensor cores.  Its meaning is that of a ``"local"`` stage: every thread holds the whole
tile (so target llvm and the CPU emulation compute it as one), and a schedule that uses
it stays a schedule of the same computation.  On the GPU each lane holds only the
elements that ``mma.sync.m16n8k8``'s accumulator layout gives it, four per 16 x 8
sub-tile (lane ``4g + t`` holds rows ``g`` and ``g + 8``, columns ``2t`` and ``2t + 1``),
and the loop nests over the tile become:

- a nest of two loops of 16 (rows) and 8 (columns) over one sub-tile, with the buffer
  read or written at ``base + width * row + column`` (the initialization, the epilogue
  that stores the tile): each lane runs the body for its four elements;
- a nest of three loops of 16, 8 and 8 (rows, columns, reduction) whose body is
  ``W[base + width * row + column] += A[..row..k..] * B[..k..column..]`` (float32): one
  ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32``, each lane loading its four
  elements of A's 16 x 8 step and its two of B's 8 x 8 step, rounded to tf32 (where a shared
  buffer is read only as such operands, its values are rounded once, as they are stored);
  for a target of precision "fp16" the reduction loop is 16 deep and the instruction
  ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` (eight A and four B elements per
  lane, rounded to float16, packed in pairs; accumulation stays float32).

Both are wrapped in a loop bound to ``threadIdx.x`` of 32: the lane (so the block's x
extent must be 32: a warp is one row of threads).  ``base`` must step whole sub-tiles:
each of its terms a multiple of ``16 * width`` (rows of sub-tiles) or of 8 below the
width (columns of sub-tiles).

Before: loop IR of target cuda after storage_flatten, before vectorize and unroll.
After: no "warp" buffer is left; each is a "local" array of its lane's elements.  An
access that fits neither nest raises LoweringError naming the buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from ...dsl.expr import Binary, Call, Const, Var, const
from ...dsl.arith import from_linear, linear_form
from ...dsl.visitor import Mutator, post_order_visit, substitute, uses_var
from ...errors import LoweringError
from ..ir import Allocate, Buffer, BufferLoad, BufferStore, Evaluate, For

M, N = 16, 8                 # the mma.sync tile: rows, columns (the reduction depends on the inputs' type)
PER_LANE = M * N // 32       # accumulator elements per lane and sub-tile
MMA_TF32 = "mma_m16n8k8_tf32"   # Evaluate(Call(MMA_TF32, (d0..d3 loads, a0..a3, b0, b1), "float32"))
ROUND_TF32 = "round_tf32"        # Call(ROUND_TF32, (x,), "float32"): x rounded to tf32 (cvt.rna), an mma operand
MMA_F16 = "mma_m16n8k16_f16"     # Evaluate(Call(MMA_F16, (d0..d3 loads, a0..a7, b0..b3), "float32"))
ROUND_F16 = "round_f16"          # Call(ROUND_F16, (x,), "float32"): x rounded to float16 (cvt.rn), an mma operand


@dataclass(frozen=True)
class MmaKind:
    """One mma.sync shape: its reduction depth, intrinsic, operand rounding and where lane ``4g + t``'s
    operand elements lie (q-th element of A: row, k; of B: k, column), from PTX's fragment layouts."""

    depth: int
    call: str
    rounding: str
    a_elements: int
    b_elements: int

    def a_at(self, q: int, g, t):
        if self.depth == 8:      # a0..a3: rows g, g + 8; k t, t + 4
            return Binary("add", g, const(8 * (q & 1))), Binary("add", t, const(4 * (q >> 1)))
        r, h = divmod(q, 2)      # a0..a7 in pairs: rows g, g + 8; k 2t (+1), 2t + 8 (+1)
        return Binary("add", g, const(8 * (r & 1))), Binary("add", Binary("mul", const(2), t), const(h + 8 * (r >> 1)))

    def b_at(self, q: int, g, t):
        if self.depth == 8:      # b0, b1: k t, t + 4; column g
            return Binary("add", t, const(4 * q)), g
        r, h = divmod(q, 2)      # b0..b3 in pairs: k 2t (+1), 2t + 8 (+1); column g
        return Binary("add", Binary("mul", const(2), t), const(h + 8 * r)), g


MMA_KINDS = {"tf32": MmaKind(8, MMA_TF32, ROUND_TF32, 4, 2), "fp16": MmaKind(16, MMA_F16, ROUND_F16, 8, 4)}


def mma_kind(target) -> MmaKind:
    """The warp tiles' instruction for ``target``: fp16 inputs where its precision is "fp16", else tf32."""
    return MMA_KINDS["fp16" if getattr(target, "precision", "fp32") == "fp16" else "tf32"]


LANE_TAG = "threadIdx.x"


def _lane_loop(body, lane: Var) -> For:
    return For(lane, const(0), const(32), "thread", body, (("thread", LANE_TAG),))


def _split_lane(lane: Var):
    """(g, t): the lane's group (0..7) and its thread in the group (0..3)."""
    return Binary("floordiv", lane, const(4)), Binary("floormod", lane, const(4))


class _Tile:
    """A warp buffer viewed as a matrix of ``rows x width`` and its lane fragments."""

    def __init__(self, alloc: Allocate):
        buf = alloc.buffer
        shape = [d.value if isinstance(d, Const) else None for d in buf.shape]
        if None in shape or len(shape) < 2:
            raise LoweringError(f"warp buffer '{buf.name}' has shape {buf.shape}: a warp tile needs a constant "
                                f"shape of at least two dimensions (rows, columns)")
        self.width = shape[-1]
        self.rows = 1
        for d in shape[:-1]:
            self.rows *= d
        strides = [s.value if isinstance(s, Const) else None for s in (buf.strides or ())]
        if strides and (strides[-1] != 1 or strides[-2] != self.width):
            raise LoweringError(f"warp buffer '{buf.name}' is padded or reordered (strides {buf.strides}); "
                                f"a warp tile is stored row-major as computed: drop storage_align/reorder_storage")
        if self.rows % M or self.width % N:
            raise LoweringError(f"warp buffer '{buf.name}' is {self.rows} x {self.width}: a warp tile is made of "
                                f"whole {M} x {N} sub-tiles; split its rows by {M} and its columns by {N}")
        self.buffer = buf
        self.fragments = Buffer(buf.name, (const(self.rows * self.width // 32),), buf.dtype, "local",
                                (const(1),))

    def fragment_base(self, base, extents: Dict[Var, int]):
        """The index of the first of a sub-tile's lane elements, from its element ``base``; None
        if ``base`` does not step whole sub-tiles."""
        form = linear_form(base)
        if form is None:
            return None
        terms, constant = form
        row_block, per_row = M * self.width, self.width // N * PER_LANE
        out = {}
        for term, c in terms.items():
            var = term.expr if isinstance(term.expr, Var) else None
            if c % row_block == 0:
                out[term] = c // row_block * per_row
            elif c % N == 0 and var in extents and c * (extents[var] - 1) + N <= self.width:
                out[term] = c // N * PER_LANE
            else:
                return None
        rows, columns = divmod(constant, row_block)
        if columns % N or columns >= self.width:
            return None
        return from_linear(out, rows * per_row + columns // N * PER_LANE)


def _chain(node, depth: int) -> Optional[List[For]]:
    """The ``depth`` perfectly nested loops starting at ``node`` (each from 0), or None."""
    loops = []
    while len(loops) < depth:
        if not (isinstance(node, For) and isinstance(node.min, Const) and node.min.value == 0
                and isinstance(node.extent, Const) and node.kind in ("serial", "unrolled")):
            return None
        loops.append(node)
        node = node.body
    return loops


class _Distribute(Mutator):
    def __init__(self, tiles: Dict[int, _Tile], kind: MmaKind):
        self.tiles = tiles
        self.kind = kind
        self.extents: Dict[Var, int] = {}
        self.lanes: List[str] = []   # thread tags of the enclosing loops

    # ------------------------------------------------------------------ walking
    def visit_Allocate(self, node):
        body = self.visit(node.body)
        tile = self.tiles.get(id(node.buffer))
        if tile is None:
            return node if body is node.body else Allocate(node.buffer, node.extent, body)
        return Allocate(tile.fragments, const(tile.fragments.shape[0]), body)

    def visit_For(self, node):
        # (each tries its loops' shape first, a few attribute reads, before it walks the body)
        rewritten = self._mma(node) or self._elementwise(node)
        if rewritten is not None:
            return rewritten
        if isinstance(node.extent, Const):
            self.extents[node.var] = node.extent.value
        tag = dict(node.annotations).get("thread") if node.kind == "thread" else None
        self.lanes.append(tag)
        try:
            return self.generic_visit(node)
        finally:
            self.lanes.pop()

    def _in_lanes(self, what: str):
        if LANE_TAG in self.lanes:
            raise LoweringError(f"{what} is inside a loop bound to {LANE_TAG}: a warp tile is computed by the "
                                f"32 threads of a warp together; compute it at a loop outside {LANE_TAG} "
                                f"(the warps: threadIdx.y/z)")

    def _tile_access(self, nodes, row: Var, column: Var):
        """{id(access): (tile, fragment base)} for every tile access among ``nodes``, or None unless each
        is at ``base + width * row + column``."""
        found = {}
        for n in nodes:
            tile = self.tiles[id(n.buffer)]
            form = linear_form(n.indices[0])
            if form is None:
                return None
            terms, constant = form
            coefs = {t.expr: c for t, c in terms.items() if isinstance(t.expr, Var)}
            if coefs.get(row) != tile.width or coefs.get(column) != 1:
                return None
            rest = {t: c for t, c in terms.items() if t.expr is not row and t.expr is not column}
            if any(uses_var(t.expr, row) or uses_var(t.expr, column) for t in rest):
                return None
            frag = tile.fragment_base(from_linear(rest, constant), self.extents)
            if frag is None:
                return None
            found[id(n)] = (tile, frag)
        return found

    # ------------------------------------------------------------------ the two nests
    def _elementwise(self, node):
        loops = _chain(node, 2)
        if loops is None or sorted(lp.extent.value for lp in loops) != [N, M]:
            return None
        row, column = (lp.var for lp in (loops if loops[0].extent.value == M else loops[::-1]))
        body = loops[1].body
        accesses = _tile_accesses(body, self.tiles)
        where = self._tile_access(accesses, row, column) if accesses else None
        if where is None:
            return None
        self._in_lanes(f"the loop nest over '{accesses[0].buffer.name}'")
        lane, r = Var("lane", "int64"), Var("r", "int64")
        g, t = _split_lane(lane)

        class _Fragments(Mutator):
            def visit_BufferLoad(self, n):
                if id(n) in where:
                    tile, frag = where[id(n)]
                    return BufferLoad(tile.fragments, (Binary("add", frag, r),))
                return self.generic_visit(n)

            def visit_BufferStore(self, n):
                value = self.visit(n.value)
                if id(n) in where:
                    tile, frag = where[id(n)]
                    return BufferStore(tile.fragments, value, (Binary("add", frag, r),))
                return BufferStore(n.buffer, value, tuple(self.visit(i) for i in n.indices))

        body = _Fragments().visit(body)
        body = substitute(body, {row: Binary("add", g, Binary("mul", const(8), Binary("floordiv", r, const(2)))),
                                 column: Binary("add", Binary("mul", const(2), t), Binary("floormod", r, const(2)))})
        return _lane_loop(For(r, const(0), const(PER_LANE), "unrolled", body), lane)

    def _mma(self, node):
        loops = _chain(node, 3)
        if loops is None or sorted(lp.extent.value for lp in loops) != sorted((M, N, self.kind.depth)):
            return None
        store = loops[2].body
        if not (isinstance(store, BufferStore) and id(store.buffer) in self.tiles):
            return None
        tile = self.tiles[id(store.buffer)]
        index = store.indices[0]
        form = linear_form(index)
        if form is None:
            return None
        coefs = {t.expr: c for t, c in form[0].items() if isinstance(t.expr, Var)}
        by_var = {lp.var: lp for lp in loops}
        row = next((v for v in by_var if coefs.get(v) == tile.width and by_var[v].extent.value == M), None)
        column = next((v for v in by_var if coefs.get(v) == 1 and by_var[v].extent.value == N), None)
        rest = [v for v in by_var if v is not row and v is not column]
        if row is None or column is None or len(rest) != 1 or uses_var(index, rest[0]):
            return None
        k = rest[0]
        value = store.value
        if not (isinstance(value, Binary) and value.op == "add" and value.dtype == "float32"):
            return None
        acc, product = (value.a, value.b) if isinstance(value.a, BufferLoad) and value.a.buffer is tile.buffer \
            else (value.b, value.a)
        if not (isinstance(acc, BufferLoad) and acc.buffer is tile.buffer and acc.indices[0] == index
                and isinstance(product, Binary) and product.op == "mul"):
            return None
        x, y = product.a, product.b
        if _tile_accesses(product, self.tiles):
            return None
        if uses_var(x, column) and not uses_var(x, row):
            x, y = y, x
        if uses_var(x, column) or uses_var(y, row) or x.dtype != "float32" or y.dtype != "float32":
            return None
        where = self._tile_access([store], row, column)
        if where is None:
            return None
        self._in_lanes(f"the multiply-accumulate into '{tile.buffer.name}'")
        frag = where[id(store)][1]
        lane = Var("lane", "int64")
        g, t = _split_lane(lane)
        kind = self.kind
        a = [_rounded(substitute(x, dict(zip((row, k), kind.a_at(q, g, t)))), kind) for q in range(kind.a_elements)]
        b = [_rounded(substitute(y, dict(zip((k, column), kind.b_at(q, g, t)))), kind)
             for q in range(kind.b_elements)]
        d = [BufferLoad(tile.fragments, (Binary("add", frag, const(q)),)) for q in range(PER_LANE)]
        return _lane_loop(Evaluate(Call(kind.call, tuple(d + a + b), "float32")), lane)


def _rounded(x, kind: MmaKind):
    return Call(kind.rounding, (x,), "float32")


def _tile_accesses(node, tiles) -> list:
    """The loads and stores of the warp buffers ``tiles`` under ``node``."""
    found = []
    post_order_visit(node, lambda n: found.append(n) if isinstance(n, (BufferLoad, BufferStore))
                     and id(n.buffer) in tiles else None)
    return found


def _round_at_stores(stmt, kind: MmaKind, double_buffers):
    """Where every load of a shared buffer is rounded for the mma (a fragment operand), round the values
    once as they are stored instead: each is read by many warps' fragments, stored once per block.
    Not for buffers filled by cp.async (``double_buffers[name]`` true), which stores what it loads."""
    loads, rounded = {}, set()

    def visit(n):
        if isinstance(n, BufferLoad) and n.buffer.scope == "shared" and not double_buffers.get(n.buffer.name):
            loads.setdefault(id(n.buffer), []).append(id(n))
        elif isinstance(n, Call) and n.name == kind.rounding and isinstance(n.args[0], BufferLoad):
            rounded.add(id(n.args[0]))
    post_order_visit(stmt, visit)
    buffers = {b for b, ids in loads.items() if all(i in rounded for i in ids)}
    if not buffers:
        return stmt

    class _Move(Mutator):
        def visit_Call(self, n):
            if n.name == kind.rounding and isinstance(n.args[0], BufferLoad) and id(n.args[0].buffer) in buffers:
                return n.args[0]
            return self.generic_visit(n)

        def visit_BufferStore(self, n):
            n = self.generic_visit(n)
            if id(n.buffer) in buffers:
                return BufferStore(n.buffer, _rounded(n.value, kind), n.indices)
            return n
    return _Move().visit(stmt)


def distribute_warp_tiles(stmt, ctx):
    tiles: Dict[int, _Tile] = {}
    post_order_visit(stmt, lambda n: tiles.__setitem__(id(n.buffer), _Tile(n))
                     if isinstance(n, Allocate) and n.buffer.scope == "warp" else None)
    if not tiles:
        return stmt
    kind = mma_kind(ctx.target)
    result = _Distribute(tiles, kind).visit(stmt)
    left = _tile_accesses(result, tiles)
    if left:
        name = left[0].buffer.name
        raise LoweringError(f"warp buffer '{name}' is accessed outside a warp tile nest: every loop nest over a "
                            f"warp tile must end in a loop of {M} rows and one of {N} columns (plus, for the "
                            f"multiply-accumulate, one of {kind.depth} over the reduction), neither vectorized nor "
                            f"bound, with the tile indexed as [row, column]; split the stage's axes by {M}, {N} and "
                            f"{kind.depth} and keep those loops innermost")
    return _round_at_stores(result, kind, ctx.double_buffers)
