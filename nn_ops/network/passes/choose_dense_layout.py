"""choose_dense_layout: dense layers with constant weights get the weight transposed once.

``dense(X, W[N, K], b)`` packs W's transpose on every call; with W constant the
transpose is done here, at compile time, and the node becomes ``dense_kn(X, W.T, b)``:
a streaming product for few rows without panels (other targets, fewer columns than a panel), the
blocked matmul otherwise.
On the CPU, a layer with at least one register tile's width of columns (and rows, however many:
a symbolic count too) gets its weight packed here into column panels [ceil(N/nr), K,
nr], the last one zero-padded (attributes ``panels``, ``columns``): the blocked matmul packed every
panel again on each call, which cost 3-20 % of a transformer's dense layers (GPT-2's and ViT's
shapes, Zen 4, 2 threads, interleaved: K=3072 1.23x, K=768 1.13x, K=192-256 1.03-1.08x).  Few
rows too: with the panels packed once, the register-blocked kernel beats the streaming one
(``matmul_small_m``) at every row count but the tiniest layers (``python -m
benchmarks.dense_rows``, Zen 5, 2 threads, interleaved: 1 x 512 x 1000 1.30x, 1 x 768 x 3072
1.97x, 7 x 256 x 1024 4.98x, 16 x 1024 x 4096 9.5x; 1 x 64 x 64 0.84x, 0.6 us), and the zoo
encoder at sequence 7 ran 2.75x faster.
The int8 product (``matmul_u8s8``, its constant weight already in words of four rows) gets its
words packed into panels the same way (1 x 768 x 3072: 0.072 -> 0.019 ms; 128 x 768 x 768: 0.092 ->
0.087 ms, one-off timing through ``lw.build``, Zen 5, 2 threads).
Accepts any graph; guarantees the same values.  Run after fold_batch_norm (which
rewrites dense weights).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...ops.int8_matmul import pairs_of_words
from ...ops.matmul import pack_panels, panel_width
from ..graph import Graph


def choose_dense_layout(g: Graph, lanes: Optional[int] = None, int8_pairs: bool = False) -> Graph:
    """``lanes``: the CPU's float32 vector lanes, to pack panels for; None (other targets, or
    no panels wanted) keeps every weight [K, N].  ``int8_pairs``: the CPU has no byte dot product
    (x86 without VNNI), so the int8 product's panels hold words of two rows widened to int16
    (``int8_matmul.pairs_of_words``: one ``pmaddwd`` a vector), for layers of at least
    ``PAIRS_MIN_ROWS`` rows: twice the weight's bytes cost a layer of few rows more than the products save
    (2 Zen 5 threads, interleaved: 128 x 768 x 768 1.9x the words' kernel as x86-64-v3 code, 1.35x as
    x86-64-v4; 1 x 768 x 3072 0.97x and 0.65x).  Re-measure: ``python -m benchmarks.int8_products``.
    Layers sharing a weight (a recurrent layer's steps, tied weights) share its packed form too."""
    packed = {}                 # (weight, panel width) -> the packed weight's name
    nodes, g.nodes = g.nodes, []
    for node in nodes:
        g.nodes.append(node)
        if node.op_type == "matmul_u8s8" and node.inputs[1] in g.initializers:
            _pack_words(g, node, lanes, packed, int8_pairs)
        if node.op_type != "dense" or node.inputs[1] not in g.initializers:
            continue
        wt = g.initializers[node.inputs[1]].T
        nr = _panel_width(g, node, wt, lanes)
        if nr:
            node.attrs = dict(node.attrs, panels=nr, columns=wt.shape[1])
        key = (node.inputs[1], nr)
        if key not in packed:
            wt = np.ascontiguousarray(wt)
            packed[key] = g.fresh_name(node.inputs[1] + (".panels" if nr else ".kn"))
            g.add_initializer(packed[key], pack_panels(wt, nr) if nr else wt)
        name = packed[key]
        node.op_type = "dense_kn"
        node.inputs = [node.inputs[0], name] + node.inputs[2:]
    return g


#: the fewest rows of an int8 product whose weight is packed as int16 pairs (a register tile's height)
PAIRS_MIN_ROWS = 8


def _pack_words(g: Graph, node, lanes: Optional[int], packed: dict, pairs: bool = False) -> None:
    """The int8 product's words in column panels.  Fewer columns than a vector (a conv to 3 RGB
    channels: unpacked, the product ran a scalar per column; 50 -> 9 ms for the style net's last
    conv) take one vector's panel: the product computes a whole vector of columns (the added ones
    zero) and a slice after it keeps the real ones.  (From one vector to a tile, the unpacked
    schedule's one-vector panels do.)"""
    words = g.initializers[node.inputs[1]]
    if node.attrs.get("panels") or not lanes or g.values[node.inputs[0]].shape[0] == 0:
        return
    n = words.shape[1]
    narrow = n < lanes
    nr = lanes if narrow else _panel_width(g, node, words, lanes, np.int32)
    if not nr:
        return
    pairs = pairs and g.values[node.inputs[0]].shape[0] >= PAIRS_MIN_ROWS
    key = (node.inputs[1], nr, pairs)
    if key not in packed:
        packed[key] = g.fresh_name(node.inputs[1] + (".pairs" if pairs else ".panels"))
        panels = pack_panels(words, nr)
        g.add_initializer(packed[key], pairs_of_words(panels) if pairs else panels)
    columns = nr if narrow else n
    node.attrs = dict(node.attrs, panels=nr, columns=columns, **({"pairs": True} if pairs else {}))
    node.inputs = [node.inputs[0], packed[key]]
    if columns != n:
        out = node.outputs[0]
        rows = g.values[out].shape[0]
        wide = g.fresh_name(out + ".wide")
        g.add_value(wide, (rows, columns), "int32")
        node.outputs = [wide]
        g.add_node("slice", [wide], [out], {"begin": (0, 0), "end": (rows, n), "step": (1, 1)}, out + ".columns")


def _panel_width(g: Graph, node, wt: np.ndarray, lanes: Optional[int], dtype=np.float32) -> int:
    """The panel width for this layer's weight (of ``dtype``), or 0 to keep it [K, N]."""
    if not lanes or wt.dtype != dtype:
        return 0
    shape = g.shape(node.inputs[0])
    rows = shape[0] if shape else None
    nr = panel_width(lanes)
    if rows is None or isinstance(rows, (int, np.integer)) and rows == 0 or wt.shape[1] < nr:
        return 0
    # a symbolic row count (sympy, at least 1) gets panels too: its one kernel serves every count
    return nr
