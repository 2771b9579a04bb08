"""Graph passes, one per file: each takes a Graph and returns it (rewritten) or a partition of it.

``optimize(graph)`` runs the standard pipeline in order; the executor then runs
``materialize_output_copies``, partitions the result into kernels (``fuse_operators``), lets
producers write concats in place (``concats_in_place``), reads contiguous slices as views
(``slices_as_views``) and packs the constants the kernels read into one blob (``pack_weights``).
"""
from __future__ import annotations

from ...ops.int8_matmul import int8_pairs
from ..graph import Graph
from .choose_conv_layout import choose_conv_layout
from .fold_affine_requantization import fold_affine_requantization
from .fold_quantized_add import fold_quantized_add
from .concats_in_place import concats_in_place
from .choose_cuda_conv import choose_cuda_conv
from .choose_dense_layout import choose_dense_layout
from .collapse_reshapes import collapse_reshapes
from .pack_conv_weights import pack_conv_weights
from .eliminate_dead_code import eliminate_dead_code
from .fold_batch_norm import fold_batch_norm
from .fold_constants import fold_constants
from .fold_pad_into_conv import fold_pad_into_conv
from .flatten_row_ops import flatten_row_ops
from .fuse_gelu import fuse_gelu
from .fuse_silu import fuse_silu
from .fuse_operators import FusedGroup, fuse_operators
from .materialize_output_copies import materialize_output_copies
from .pack_weights import pack_weights
from .rejoin_slices import rejoin_slices
from .sink_reshapes import sink_reshapes
from .slices_as_views import slices_as_views


def optimize(graph: Graph, target_kind: str = "llvm", precision: str = "fp32") -> Graph:
    """The standard graph pipeline, on a copy: fold constants, zero pads and BN into convs,
    recognise GELU and SiLU, move reshapes below elementwise ops (row ops over symbolic sizes onto
    (rows, n) views) and collapse chains of them, keep CPU convolution networks in
    the blocked layout (on the GPU: convolutions as implicit GEMMs), requantize 8-bit values through affine
    float ops in one multiply-add, pre-transpose constant dense weights, pre-pack constant conv
    weights, drop dead code.  ``precision`` "tf32" or "fp16" (cuda): convolutions shaped for the tensor cores."""
    g = graph.copy()
    g = fold_constants(g)
    g = fuse_gelu(g)
    g = fuse_silu(g)
    g = sink_reshapes(g)
    g = flatten_row_ops(g)
    g = collapse_reshapes(g)
    g = eliminate_dead_code(g)
    g = fold_pad_into_conv(g)
    g = fold_batch_norm(g)
    g = fold_constants(g)
    g = rejoin_slices(g)
    if target_kind == "llvm":
        g = choose_conv_layout(g)
    g = fold_affine_requantization(g)
    g = fold_quantized_add(g)
    if target_kind == "cuda":
        g = choose_cuda_conv(g, precision)
    g = choose_dense_layout(g, _host_lanes() if target_kind == "llvm" else None,
                            int8_pairs=target_kind == "llvm" and _int8_pairs())
    g = pack_conv_weights(g)
    g = eliminate_dead_code(g)
    g.check()
    return g


def _host_lanes() -> int:
    from ....target import resolve_target
    return resolve_target("llvm").lanes("float32")


def _int8_pairs() -> bool:
    from ....target import resolve_target
    return int8_pairs(resolve_target("llvm"))


__all__ = ["optimize", "choose_conv_layout", "choose_cuda_conv", "fold_constants", "fold_pad_into_conv", "fold_batch_norm", "fold_affine_requantization", "fold_quantized_add", "choose_dense_layout", "flatten_row_ops", "pack_conv_weights",
           "eliminate_dead_code", "fuse_gelu", "fuse_silu", "sink_reshapes", "collapse_reshapes", "rejoin_slices", "fuse_operators", "FusedGroup",
           "materialize_output_copies", "concats_in_place", "slices_as_views", "pack_weights"]
