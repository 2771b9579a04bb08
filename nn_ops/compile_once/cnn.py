"""Convolutional networks in ``build_polymorphic``: symbolic batch, height and width.

Activations between convolutions stay in the blocked NCHW[b]c layout (``nchwc.py``, the static
path's layout), with the batch, height and width symbolic and the channel blocks constant:

- ``Conv`` (dense or depthwise, a constant weight) is one kernel with what follows it folded in:
  a ``BatchNormalization`` right after it goes into its weight and bias; then elementwise nodes
  (ReLU, Clip, a residual Add of another blocked value of the same shape, ...) as its epilogue.
  A plain NCHW input is read as it lies (a stem's 3 channels) or copied once ``to_blocked``.
  Output channels that are not whole blocks are padded with zero weights (the next conv reads
  them with zero weights too). Besides the general kernel, variants taken per binding: register
  blocks of 7 or 5 pixels where they divide the row, and for 3x3 stride-1 convs Winograd over
  whole tiles (``winograd_rows.py``).
- ``MaxPool`` / ``AveragePool`` pool the blocked value; the result [N, C/b, 1, 1, b] of
  ``GlobalAveragePool`` (or ``GlobalMaxPool``) is, byte for byte, the NCHW [N, C, 1, 1] its
  consumers read (a view).
- A channel ``Concat`` of whole blocks, and a ``BatchNormalization`` not after a conv, run on
  blocked values too (``standalone``), with the elementwise nodes after them; so does a ``Mul`` of
  a map by a per-channel gate [N, C, 1, 1] (squeeze-and-excitation, ``scale_channels``).
- Any other reader of a blocked value gets it back as NCHW (one ``from_blocked`` kernel).

Kernels take the sizes of their inputs as arguments and compute their output's (the
``(H + 2*p - k)//s + 1`` of a convolution) themselves; ``_Builder.kernel`` proves those equal to
the graph's.  Grouped convolutions (other than depthwise) are refused with the others.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np

from ...dsl import intrinsics as lwi
from ...dsl.expr import binary, cast, const, if_then_else, select
from ...dsl.tensor import compute, placeholder
from ...errors import ExprError
from ..network import symbolic as S
from ..network.passes.choose_conv_layout import TO_BLOCKED_MIN_CHANNELS
from ..ops.conv2d import FEW_CHANNELS, _divisor_at_most, conv2d_rows
from ..ops.nchwc import (conv2d_blocked, depthwise_blocked, from_blocked, global_pool_blocked, merged_groups,
                         pack_blocked_weight, pack_depthwise_weight, pool2d_blocked, to_blocked)
from ..ops.pooling import pool2d
from ..ops.resize import axis_taps, coefficient_fn, resize_taps, source_coordinates
from ..ops.shape import reduce
from ..ops.winograd import winograd_weight
from ..ops.winograd_rows import conv2d_winograd_rows
from ..onnx_import.context import optional_input
from ..onnx_import.importer import node_label
from ..onnx_import.converters.nn import inference_scale_shift
from ..network.conv_variants import is_projection, row_block_variants, winograd_variants
from ..network.polymorphic_executable import BindingTable
from .common import (BINARY, UNARY, WITH_ATTRS, _apply, _attr, _same, _show,
                                 conv_transpose_attrs, node_params)



class CnnWalk:
    """The CNN part of one ``_Builder``'s walk: ``blocked`` maps an ONNX value to the arena value
    holding it blocked; ``plain`` materialises the NCHW form where something else reads it."""

    def __init__(self, builder, unsupported):
        self.b = builder
        self.unsupported = unsupported          # the builder's exception for "not covered"
        self.blocked = {}                       # ONNX value -> its blocked arena value
        self.block = builder.target.lanes("float32")

    # ------------------------------------------------------------------ layout
    def plain(self, name: str) -> None:
        """Make the NCHW value ``name`` exist (``from_blocked`` of its blocked form) if only that exists."""
        b = self.b
        if name not in self.blocked or name in b.values or name in b.local or name in b.consts:
            return
        src = self.blocked[name]
        channels = int(b.shapes.shapes[name][1])
        b.kernel(f"{name}.from_blocked", ("from_blocked", channels), [src], name,
                 lambda x, extent: from_blocked(x, channels), out_shape=b.shapes.shapes[name])

    def blocked_input(self, name: str, what: str) -> str:
        """The blocked arena value of ``name``, copying a plain one ``to_blocked`` once."""
        b = self.b
        if name in self.blocked:
            return self.blocked[name]
        shape = b.shape(name)
        if len(shape) != 4 or not S.is_static(shape[1]) or int(shape[1]) % self.block:      # (no padded copy yet)
            raise self.unsupported(f"{what} of a value of shape {_show(shape)}: the blocked layout needs 4-d "
                                   f"NCHW with a multiple of {self.block} channels")
        if b.dtype(name) != "float32":
            raise self.unsupported(f"{what} of {b.dtype(name)} values (float32 only)")
        dst = b.fresh(name + ".blocked")
        b.kernel(f"{name}.to_blocked", ("to_blocked", self.block), [name], dst,
                 lambda x, extent: to_blocked(x, self.block), out_shape=self.blocked_shape(shape))
        self.blocked[name] = dst
        return dst

    def blocked_shape(self, nchw) -> tuple:
        """The blocked shape of an NCHW value: channels padded up to whole blocks (zeros after a
        convolution whose weight and bias are padded with zeros; dropped by ``from_blocked``)."""
        n, c, h, w = nchw
        return (n, S.dim(self.padded_channels(int(c)) // self.block), h, w, S.dim(self.block))

    def padded_channels(self, channels: int) -> int:
        return -(-channels // self.block) * self.block

    # ------------------------------------------------------------------ convolutions
    def window(self, node):
        """(stride, padding as top, left, bottom, right, dilation) of a 2-d Conv or pool."""
        if _attr(node, "auto_pad", "NOTSET") != "NOTSET":
            raise self.unsupported("auto_pad (give explicit pads)")
        pads = tuple(int(v) for v in _attr(node, "pads", [0, 0, 0, 0]))
        return (tuple(int(v) for v in _attr(node, "strides", [1, 1])), pads,
                tuple(int(v) for v in _attr(node, "dilations", [1, 1])))

    def conv(self, k: int, node, label: str) -> None:
        b = self.b
        x, w = node.input[0], node.input[1]
        if w not in b.consts:
            raise self.unsupported("a Conv whose weight is computed")
        weight = np.asarray(b.consts[w], dtype=np.float32)
        groups = int(_attr(node, "group", 1))
        if weight.ndim != 4:
            raise self.unsupported("non-2-d convolutions")
        if b.dtype(self.blocked.get(x, x)) != "float32":
            raise self.unsupported(f"a Conv of {b.dtype(x)} values (float32 only)")
        bias, window = _conv_bias(node, b), self.window(node)
        depthwise = groups > 1 and groups == weight.shape[0] and weight.shape[1] == 1
        if groups > 1 and not depthwise:
            # groups that are not whole blocks (ResNeXt's 32 x 4 channels, 16 -> 32 in 2 groups): merged
            # into groups of whole blocks, each output channel's weight zero outside its own group
            merged = merged_groups(weight, groups, self.block, self.block)
            if merged is None:      # (1 in and 3 out per group: 16x) rows of the NCHW map, group by group
                return self.few_channels(node, label, weight, bias, window, groups)
            weight, groups = merged
        grouped = 1 if groups == 1 or depthwise else groups
        oc, c = weight.shape[0], weight.shape[1] * groups
        stride, padding, dilation = window
        if groups == 1 and oc < FEW_CHANNELS:
            return self.few_channels(node, label, weight, bias, window)
        if depthwise or grouped != 1 or x in self.blocked or (c >= TO_BLOCKED_MIN_CHANNELS and c % self.block == 0):
            x_in, cb = self.blocked_input(x, "a Conv"), self.block
        else:
            x_in, cb = x, _divisor_at_most(c, 8)                 # read as it lies (a stem's 3 channels)
        members = self.epilogue(k, node, padded=self.padded_channels(oc) != oc)
        final = members[-1].output[0] if members else node.output[0]
        if members and members[0].op_type == "BatchNormalization":
            weight, bias = _fold_batch_norm(members[0], weight, bias, b.consts)
        b.done.update(id(m) for m in members)
        # zeros for the channels that pad the output (and, for a padded input, the input) to whole blocks
        c_pad = int(b.shape(x_in)[1]) * cb if x_in != x else c
        weight = _zero_padded(_zero_padded(weight, self.padded_channels(oc), 0),
                              1 if depthwise else c_pad // grouped, 1)
        bias = None if bias is None else _zero_padded(bias, self.padded_channels(oc), 0)
        w_name = b.fresh(w + ".blocked")
        b.consts[w_name] = pack_depthwise_weight(weight, self.block) if depthwise else \
            pack_blocked_weight(weight, self.block, cb)
        inputs = [x_in, w_name]
        in_shape = b.shape(x_in)
        winograd = (not depthwise and grouped == 1 and x_in != x and weight.shape[2:] == (3, 3)
                    and stride == (1, 1) and dilation == (1, 1) and padding in ((1, 1, 1, 1), (0, 0, 0, 0))
                    and min(c, oc) >= 16 and b.target.kind == "llvm"
                    and not (S.is_static(in_shape[2]) and S.is_static(in_shape[3])))
        if winograd:            # every kernel of the call takes the transformed weight too (one argument list)
            inputs.append(b.fresh(w + ".winograd"))
            b.consts[inputs[-1]] = winograd_weight(weight, self.block, cb)
        if bias is not None:
            inputs.append(b.fresh(w + ".bias"))
            b.consts[inputs[-1]] = np.ascontiguousarray(bias, dtype=np.float32)
        steps = [m for m in members if m.op_type != "BatchNormalization"]
        anchor_names = [node.output[0]] + [m.output[0] for m in members if m.op_type == "BatchNormalization"]
        externals, structure = _epilogue_plan(steps, anchor_names, b)
        inputs += [self.blocked[e] for e in externals]
        has_bias = bias is not None

        def make(*holders, extent, row_block=None, tile_block=None, whole_blocks=False):
            X, Wp = holders[0], holders[1]
            U = holders[2] if winograd else None
            B = holders[2 + winograd] if has_bias else None
            if tile_block:
                Y = conv2d_winograd_rows(X, U, B, padding=padding, name="conv", tile_block=tile_block,
                                         whole_blocks=whole_blocks)
            elif depthwise:
                Y = depthwise_blocked(X, Wp, B, stride=stride, padding=padding, dilation=dilation, name="conv",
                                      row_block=row_block, whole_blocks=whole_blocks)
            else:
                Y = conv2d_blocked(X, Wp, B, stride=stride, padding=padding, dilation=dilation, name="conv",
                                   row_block=row_block, groups=grouped, whole_blocks=whole_blocks)
            return _with_epilogue(Y, steps, anchor_names, externals, b)
        out = b.fresh(final + ".blocked")
        out_shape = self.blocked_shape(b.shapes.shapes[final])
        variants = winograd_variants(b.target, in_shape, out_shape, padding[0], make) if winograd else []
        if not is_projection(weight.shape, stride):
            variants += row_block_variants(out_shape[3], make, None if depthwise else b.consts[w_name].shape,
                                            x_in != x, b.aliased(in_shape)[3])
        key = _conv_key(depthwise, stride, padding, dilation, has_bias, winograd, structure, grouped)
        b.kernel(label, key, inputs, out, make, out_shape=out_shape, derived_output=True, own_inputs=len(externals),
                 variants=variants)
        self.blocked[final] = out

    def few_channels(self, node, label: str, weight, bias, window, groups: int = 1) -> None:
        """A conv with fewer output channels than ``FEW_CHANNELS`` (the image a style net ends in,
        a mask), or of groups too small to merge into whole blocks (``nchwc.MAX_GROUP_MERGE``), as vector
        rows of NCHW maps of any width (``conv2d_rows``): in blocks, its channels would be mostly
        padding (the style net's 9x9 32 -> 3 at 256x256: 11.7 ms blocked, 3 of 16 channels)."""
        b, x = self.b, node.input[0]
        self.plain(x)
        inputs = [x, b.fresh(node.input[1] + ".rows")]
        b.consts[inputs[1]] = np.ascontiguousarray(weight)
        if bias is not None:
            inputs.append(b.fresh(node.input[1] + ".bias"))
            b.consts[inputs[-1]] = np.ascontiguousarray(bias)
        stride, padding, dilation = window

        def make(X, W, B=None, extent=None):
            return conv2d_rows(X, W, B, stride=stride, padding=padding, dilation=dilation, groups=groups,
                               name="conv")
        b.kernel(label, ("conv_rows", stride, padding, dilation, groups, bias is not None), inputs, node.output[0],
                 make, derived_output=True)

    def is_up_convolution(self, node) -> bool:
        """A ConvTranspose whose kernel equals its stride, without padding or groups, of constant
        weight and bias, whole channel blocks in and out (a U-Net's 2x2/2 up-sampling)."""
        b = self.b
        w = b.consts.get(node.input[1])
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        shape = b.shapes.shapes.get(node.input[0])
        if w is None or w.ndim != 4 or (bias is not None and bias not in b.consts) or shape is None or len(shape) != 4:
            return False
        return (conv_transpose_attrs(node) == (tuple(w.shape[2:]), (1, 1), (0, 0, 0, 0), (0, 0), 1)
                and w.shape[0] % self.block == 0 and w.shape[1] % self.block == 0
                and b.dtype(self.blocked.get(node.input[0], node.input[0])) == "float32")

    def up_convolution(self, k: int, node, label: str) -> None:
        """``is_up_convolution``'s ConvTranspose as the static path computes it: each input pixel writes
        its own KH x KW tile, so it is a 1x1 convolution to KH*KW*OC channels (the blocked conv kernel,
        its row-block variants) and a copy of each tap's channel blocks to its pixels
        (``_blocked_depth_to_space``).  The gather form ran a 512 -> 256 one at 4x4 in 27 s."""
        b = self.b
        weight = np.asarray(b.consts[node.input[1]], dtype=np.float32)        # [C, OC, KH, KW]
        c, oc, kh, kw = weight.shape
        x_in = self.blocked_input(node.input[0], "a ConvTranspose")
        taps = np.ascontiguousarray(weight.transpose(2, 3, 1, 0).reshape(kh * kw * oc, c, 1, 1))   # (ky, kx, o)
        inputs = [x_in, b.fresh(node.input[1] + ".taps")]
        b.consts[inputs[1]] = pack_blocked_weight(taps, self.block, self.block)
        if len(node.input) > 2 and node.input[2]:
            inputs.append(b.fresh(node.input[2] + ".taps"))
            b.consts[inputs[2]] = np.tile(b.consts[node.input[2]].astype(np.float32), kh * kw)
        has_bias = len(inputs) == 3

        def make(X, Wp, B=None, extent=None, row_block=None, whole_blocks=False):
            return conv2d_blocked(X, Wp, B, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), name="conv",
                                  row_block=row_block, whole_blocks=whole_blocks)
        n, _, h, w, _ = b.shape(x_in)
        tiles = b.fresh(node.output[0] + ".taps")
        b.kernel(label, _conv_key(False, (1, 1), (0, 0, 0, 0), (1, 1), has_bias, False, ()), inputs, tiles, make,
                 out_shape=(n, S.dim(kh * kw * oc // self.block), h, w, S.dim(self.block)), derived_output=True,
                 variants=row_block_variants(w, make, b.consts[inputs[1]].shape, True, b.aliased((w,))[0]))
        out = b.fresh(node.output[0] + ".blocked")
        b.kernel(f"{label}.depth_to_space", ("depth_to_space", kh, kw), [tiles], out,
                 lambda z, extent: _blocked_depth_to_space(z, kh, kw, oc // self.block),
                 out_shape=self.blocked_shape(b.shapes.shapes[node.output[0]]), derived_output=True)
        self.blocked[node.output[0]] = out

    def resize(self, node, label: str) -> None:
        """Up-sampling of a map by whole factors given as scales (a U-Net's or an FPN's
        ``F.interpolate(scale_factor=2)``), on the blocked value.  Nearest: output pixel (y, x) reads
        (y // sh, x // sw), which is what ONNX's asymmetric/floor and half-pixel/round modes pick at a
        whole factor.  Linear (half-pixel or asymmetric): at a whole factor ``s`` the source coordinate
        of output row ``y`` is ``y // s`` plus an offset and a weight that depend on ``y % s`` only, so
        the two taps are ``y // s + fl`` and the next, clamped to the map (as onnxruntime clamps the
        coordinate).  Linear with align_corners: the coordinate ``y * (H - 1) / (s*H - 1)`` depends on
        the run-time size, so it is computed per row and column as onnxruntime computes it (in
        float32).  Any other resize of the height and width: ``resize_by_tables``."""
        b = self.b
        mode = _attr(node, "mode", "nearest")
        transform = _attr(node, "coordinate_transformation_mode", "half_pixel")
        rounding = _attr(node, "nearest_mode", "round_prefer_floor")
        scales = b.consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        whole = scales is not None and scales.size == 4 and list(scales[:2]) == [1, 1] and \
            all(float(v).is_integer() and v >= 1 for v in scales[2:])
        picks_floor = (transform == "asymmetric" and rounding == "floor") or \
            (transform in ("half_pixel", "pytorch_half_pixel") and rounding.startswith("round_prefer"))
        linear = mode == "linear" and transform in LINEAR_TRANSFORMS and not _attr(node, "antialias", 0)
        if not whole or not (mode == "nearest" and picks_floor or linear):
            self.resize_by_tables(node, label, mode, transform, rounding, scales)
            return
        sh, sw = (int(v) for v in scales[2:])
        x = self.blocked_input(node.input[0], "a Resize")
        out = b.fresh(node.output[0] + ".blocked")
        if linear:
            make = _linear_upsample(sh, sw, transform)
        else:
            def make(t, extent):
                n, cb, h, w, ci = t.shape
                return compute((n, cb, h * sh, w * sw, ci), lambda nn, c, y, xx, i: t[nn, c, y // sh, xx // sw, i],
                               name="upsample", tag="injective")
        b.kernel(label, ("upsample", mode, transform if linear else "", sh, sw), [x], out, make,
                 out_shape=self.blocked_shape(b.shapes.shapes[node.output[0]]), derived_output=True)
        self.blocked[node.output[0]] = out

    def resize_by_tables(self, node, label: str, mode: str, transform: str, rounding: str, scales) -> None:
        """Any other Resize of a map's height and width: sizes given (constant, or computed from
        shapes as torch exports ``F.interpolate(size=skip.shape[2:])``), or scales that are not whole
        factors, in nearest, linear or cubic mode.  A gather of weighted taps (``resize_taps``) whose
        source indices and weights are tables computed per binding (``BindingTable``) by the numpy
        code that makes a static compile's tables (``source_coordinates``, ``axis_taps``), so both
        read the same taps with the same weights."""
        b = self.b
        x_name, out_name = node.input[0], node.output[0]
        in_shape, out_shape = b.shape(x_name), b.shapes.shapes[out_name]
        why = None
        antialias = bool(_attr(node, "antialias", 0)) and mode != "nearest"
        if mode not in ("nearest", "linear", "cubic"):
            why = f"mode {mode!r}"
        elif antialias and (scales is None or scales.size != 4):
            why = "antialias with sizes given (its tap count depends on the scale, which the input size changes)"
        elif transform == "tf_crop_and_resize":
            why = "coordinate_transformation_mode 'tf_crop_and_resize'"
        elif _attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
            why = "keep_aspect_ratio_policy other than 'stretch'"
        elif len(in_shape) != 4 or any(S.equal(o, i) is not True for o, i in zip(out_shape[:2], in_shape[:2])):
            why = "a resize of other axes than the height and width of an NCHW map"
        elif mode != "nearest" and x_name not in self.blocked and b.dtype(x_name) not in ("float32", "float64"):
            why = f"{mode} resize of {b.dtype(x_name)} values"
        if why is not None:
            raise self.unsupported(f"Resize: {why}")
        given = [float(v) for v in scales.reshape(-1)] if scales is not None and scales.size == 4 else None
        coeffs = coefficient_fn(mode, rounding, float(_attr(node, "cubic_coeff_a", -0.75)), antialias)
        exclude = bool(_attr(node, "exclude_outside", 0))
        weighted = mode != "nearest"
        dtype = "float32" if x_name in self.blocked else b.dtype(x_name)
        tables = []
        for axis, what in ((2, "rows"), (3, "cols")):
            @functools.lru_cache(maxsize=8)     # the index and the weight table of a binding: computed once
            def sized_taps(d: int, o: int, axis=axis):
                scale = given[axis] if given is not None else o / d
                return axis_taps(source_coordinates(transform, o, d, scale), d, scale, coeffs, exclude)

            def taps(binding, axis=axis, sized_taps=sized_taps):
                return sized_taps(int(S.evaluate(in_shape[axis], binding)), int(S.evaluate(out_shape[axis], binding)))
            # taps per output: antialiased ones widen with the (constant) down-scale
            count = 1 if not weighted else coeffs(0.5, given[axis] if antialias else 1.0).size
            if weighted:
                parts = [(f".{what}_index", "int64", lambda binding, taps=taps: taps(binding)[0]),
                         (f".{what}_weight", dtype, lambda binding, taps=taps: taps(binding)[1])]
            else:       # one-hot weights: the chosen index only
                def nearest(binding, taps=taps):
                    idx, w = taps(binding)
                    return idx[np.arange(idx.shape[0]), w.argmax(axis=1)][:, None]
                parts = [(f".{what}_index", "int64", nearest)]
            for suffix, table_dtype, compute_table in parts:
                name = b.fresh(out_name + suffix)
                b.tables[name] = BindingTable((out_shape[axis], S.dim(count)), table_dtype, compute_table)
                tables.append(name)

        def make(t, *tabs, extent):
            return resize_taps(t, (2, 3), tabs, weighted, name="resize")
        key = ("resize_taps", mode, weighted)
        if x_name in self.blocked:
            out = b.fresh(out_name + ".blocked")
            b.kernel(label, key + ("blocked",), [self.blocked[x_name]] + tables, out, make,
                     out_shape=self.blocked_shape(out_shape))
            self.blocked[out_name] = out
        else:
            b.kernel(label, key, [x_name] + tables, out_name, make, out_shape=out_shape)

    def epilogue(self, k: int, conv, padded: bool = False, fold_batch_norm: bool = True) -> list:
        """The nodes right after ``conv`` that its kernel computes: a BatchNormalization first (folded
        into the weight), then elementwise nodes on its result and on blocked values of its shape
        (on a result ``padded`` with zero channels, only nodes that keep those finite: a NaN there
        would reach the real channels through the next convolution's zero weights).  Without
        ``fold_batch_norm`` (an anchor that is no conv) a BatchNormalization ends it."""
        b = self.b
        shape = b.shapes.shapes[conv.output[0]]
        members, internal = [], {conv.output[0]}
        ahead = set()                           # nodes converted ahead of their place (convert_ahead)
        for q, cand in enumerate(list(b.model.graph.node)[k + 1:], k + 1):
            if id(cand) in ahead:
                continue
            if id(cand) not in b.done and not any(i in internal for i in cand.input):
                ahead = self.convert_ahead(q, internal)
                if ahead:
                    continue
            if id(cand) in b.done or not any(i in internal for i in cand.input):
                break
            if cand.op_type == "BatchNormalization":
                if not fold_batch_norm or members or _inference_batch_norm(cand, b) is not None:
                    break
            elif not _epilogue_node(cand, internal, shape, self.blocked, b) or \
                    (padded and not _keeps_padding_finite(cand, b)):
                break
            members.append(cand)
            internal.add(cand.output[0])
        while members and not b.escapes_only_last(conv, members):
            members.pop()
        return members

    def convert_ahead(self, j: int, internal) -> set:
        """Convert node ``j``, a Conv of a blocked value that exists (with the BatchNormalization right
        after it), ahead of its place when the node after them reads its result and one of the
        ``internal`` values of the epilogue being gathered: a residual block's projection shortcut
        between the block's last conv and the Add (torchvision's order).  The last conv then takes
        the Add and shares its kernels (6 with their variants) with the other blocks' last convs,
        as the static path fuses them.  Returns the ids of the nodes converted (none: left to their
        place in the walk, which reports anything it cannot convert)."""
        b = self.b
        nodes = b.model.graph.node
        node = nodes[j]
        if node.op_type != "Conv" or node.input[0] not in self.blocked or \
                any(i not in b.consts for i in node.input[1:] if i):
            return set()
        result, after = node.output[0], j + 1
        if after < len(nodes) and nodes[after].op_type == "BatchNormalization" and nodes[after].input[0] == result:
            result, after = nodes[after].output[0], after + 1
        if after >= len(nodes) or result not in nodes[after].input or \
                not any(i in internal for i in nodes[after].input):
            return set()
        before = set(b.done)
        try:
            self.conv(j, node, node_label(j, node))
        except self.unsupported:
            return set()
        b.done.add(id(node))
        return b.done - before

    # ------------------------------------------------------------------ concats and batch norms
    def channel_concat(self, node) -> bool:
        """Whether ``node`` is a Concat of 4-d maps along the channels, each a whole number of blocks
        (SqueezeNet's fire modules, DenseNet's blocks): then it runs on blocked values."""
        b = self.b
        axis = int(_attr(node, "axis", 0))
        shapes = [b.shapes.shapes.get(i) for i in node.input]
        return (all(s is not None and len(s) == 4 for s in shapes) and axis in (1, -3)
                and all(S.is_static(s[1]) and int(s[1]) % self.block == 0 for s in shapes))

    def standalone(self, k: int, node, label: str) -> None:
        """A channel Concat, a BatchNormalization not right after a conv, or an InstanceNormalization
        of a blocked value, on blocked values, with the elementwise nodes after it as its epilogue
        (DenseNet: concat, then BN-ReLU, then conv; a style-transfer net: conv, IN-ReLU, conv)."""
        b = self.b
        is_in = node.op_type == "InstanceNormalization"
        if is_in and (not all(i in b.consts for i in node.input[1:3]) or len(b.shapes.shapes[node.input[0]]) != 4):
            raise self.unsupported("an InstanceNormalization with a computed scale or bias")
        if node.op_type == "BatchNormalization":
            why = _inference_batch_norm(node, b)
            if why is not None:
                raise self.unsupported(why)
            shape = b.shapes.shapes[node.input[0]]
            if len(shape) != 4:
                raise self.unsupported(f"a BatchNormalization of a {len(shape)}-d value (4-d maps only)")
        sources = [self.blocked_input(i, node.op_type) for i in (node.input if node.op_type == "Concat" else node.input[:1])]
        if node.op_type == "Concat":        # the parts' maps: one size, proven or checked at run time
            first = b.shapes.shapes[node.input[0]]
            for i in node.input[1:]:
                for q in (0, 2, 3):         # N, H, W
                    if not b.assume_equal(b.shapes.shapes[i][q], first[q], i):
                        raise self.unsupported(f"a Concat of maps of sizes {_show(b.shapes.shapes[i])} and "
                                               f"{_show(first)}")
        members = self.epilogue(k, node, fold_batch_norm=False)
        b.done.update(id(m) for m in members)
        final = members[-1].output[0] if members else node.output[0]
        inputs = list(sources)
        if node.op_type == "BatchNormalization" or is_in:     # a scale and shift per channel, padded with zeros
            shape = b.shapes.shapes[node.input[0]]
            pair = _scale_shift(node, b.consts) if not is_in else \
                [np.asarray(b.consts[i], np.float32).reshape(-1) for i in node.input[1:3]]
            packed = b.fresh(node.input[1] + ".blocked")
            b.consts[packed] = np.stack([_zero_padded(v, self.padded_channels(int(shape[1])), 0).reshape(-1, self.block)
                                         for v in pair])      # [2, C/b, b]
            inputs.append(packed)
        externals, structure = _epilogue_plan(members, [node.output[0]], b)
        inputs += [self.blocked[e] for e in externals]
        counts = [int(b.shape(x)[1]) for x in sources]
        is_bn = node.op_type == "BatchNormalization"
        eps = float(_attr(node, "epsilon", 1e-5))

        def make(*holders, extent):
            if is_bn:
                X, P = holders[0], holders[1]
                Y = compute(X.shape, lambda n, cb, y, x, ci: X[n, cb, y, x, ci] * P[0, cb, ci] + P[1, cb, ci],
                            name="batch_norm", tag="elemwise")
            elif is_in:
                Y = _blocked_instance_norm(holders[0], holders[1], eps)
            else:
                Y = _blocked_concat(holders[:len(sources)], counts)
            return _with_epilogue(Y, members, [node.output[0]], externals, b)
        out = b.fresh(final + ".blocked")
        b.kernel(label, (node.op_type, tuple(counts), structure) + ((eps,) if is_in else ()), inputs, out, make,
                 out_shape=self.blocked_shape(b.shapes.shapes[final]), own_inputs=len(externals), derived_output=True)
        self.blocked[final] = out

    def channel_scale(self, node) -> Optional[tuple]:
        """(map, scale) where ``node`` is a Mul of a blocked map [N, C, H, W] by a blocked value
        [N, C, 1, 1] (a squeeze-and-excitation gate), else None."""
        b = self.b
        if node.op_type != "Mul" or len(node.input) != 2 or not all(i in self.blocked for i in node.input):
            return None
        out = b.shapes.shapes.get(node.output[0])
        for x, gate in (tuple(node.input), tuple(node.input[::-1])):
            xs, gs = b.shapes.shapes.get(x), b.shapes.shapes.get(gate)
            if xs is None or gs is None or len(xs) != 4 or not _same(out, xs):
                continue
            if _same(gs, (xs[0], xs[1], 1, 1)) and not _same(xs[2:], (1, 1)):
                return x, gate
        return None

    def scale_channels(self, k: int, node, label: str, x: str, gate: str) -> None:
        """``channel_scale``'s Mul on the blocked values, each channel vector of the map times the
        gate's (the elementwise nodes after it as its epilogue): read as NCHW, the map went out of
        the blocked layout and back for it, a third of EfficientNet's time."""
        b = self.b
        channels = int(b.shapes.shapes[x][1])
        members = self.epilogue(k, node, padded=self.padded_channels(channels) != channels, fold_batch_norm=False)
        b.done.update(id(m) for m in members)
        final = members[-1].output[0] if members else node.output[0]
        externals, structure = _epilogue_plan(members, [node.output[0]], b)
        inputs = [self.blocked[x], self.blocked[gate]] + [self.blocked[e] for e in externals]

        def make(X, G, extent):
            Y = compute(X.shape, lambda n, cb, y, xx, ci: X[n, cb, y, xx, ci] * G[n, cb, 0, 0, ci],
                        name="scale_channels", tag="elemwise")
            return _with_epilogue(Y, members, [node.output[0]], externals, b)
        out = b.fresh(final + ".blocked")
        b.kernel(label, ("scale_channels", structure), inputs, out, make,
                 out_shape=self.blocked_shape(b.shapes.shapes[final]), own_inputs=len(externals), derived_output=True)
        self.blocked[final] = out

    # ------------------------------------------------------------------ pools
    def pool(self, node, label: str) -> None:
        """A pool of a blocked map (or one made blocked: whole blocks of channels), or of an NCHW
        value whose channels are no whole blocks (an image's 1 or 3, a map of rank other than 4) as
        it lies: ``pool2d`` as the static path's, a global pool a mean or max over the map."""
        b = self.b
        shape = b.shape(node.input[0])
        plain = node.input[0] not in self.blocked and (len(shape) != 4 or not S.is_static(shape[1])
                                                       or int(shape[1]) % self.block)
        if node.op_type in ("GlobalAveragePool", "GlobalMaxPool"):
            kind = "avg" if node.op_type == "GlobalAveragePool" else "max"
            if plain:
                axes, how = list(range(2, len(shape))), "mean" if kind == "avg" else "max"
                return b.kernel(label, (f"global_{how}_plain", len(axes)), [node.input[0]], node.output[0],
                                lambda t, extent: reduce(t, axes, how, name="global_pool"))
            x, out = self.blocked_input(node.input[0], node.op_type), b.fresh(node.output[0] + ".blocked")
            out_shape = self.blocked_shape(b.shapes.shapes[node.output[0]])
            b.kernel(label, (f"global_{kind}_pool",), [x], out, lambda t, extent: global_pool_blocked(t, kind),
                     out_shape=out_shape, derived_output=True)
            if int(out_shape[1]) * self.block == int(b.shapes.shapes[node.output[0]][1]):
                b.view(out, node.output[0])       # [N, C/b, 1, 1, b] is the NCHW [N, C, 1, 1]
            else:                                 # padded channels: dropped by from_blocked
                self.blocked[node.output[0]] = out
                self.plain(node.output[0])
            return
        if len([o for o in node.output if o]) != 1 or len(shape) != 4:
            raise self.unsupported(f"a {node.op_type} with an indices output or of shape {_show(shape)} (2-d "
                                   f"pools are covered)")
        kernel = tuple(int(v) for v in _attr(node, "kernel_shape", None))
        stride, padding, dilation = self.window(node)
        ceil_mode, include_pad = bool(_attr(node, "ceil_mode", 0)), bool(_attr(node, "count_include_pad", 0))
        kind = "max" if node.op_type == "MaxPool" else "avg"

        def make(t, extent):
            try:
                if plain:
                    return pool2d(t, kernel, stride, padding, dilation, kind, include_pad, ceil_mode, name="pool")
                return pool2d_blocked(t, kernel, stride, padding, dilation, kind, ceil_mode, include_pad)
            except ExprError as exc:
                raise self.unsupported(str(exc)) from None
        key = ("plain_pool" if plain else "pool", kind, kernel, stride, padding, dilation, ceil_mode, include_pad)
        if plain:
            return b.kernel(label, key, [node.input[0]], node.output[0], make, derived_output=True)
        out = b.fresh(node.output[0] + ".blocked")
        b.kernel(label, key, [self.blocked_input(node.input[0], node.op_type)], out, make,
                 out_shape=self.blocked_shape(b.shapes.shapes[node.output[0]]), derived_output=True)
        self.blocked[node.output[0]] = out


def _blocked_instance_norm(X, P, eps: float):
    """InstanceNormalization of the blocked ``X`` [N, C/b, H, W, b], scale and shift ``P`` [2, C/b, b]:
    the mean and the mean squared deviation of each channel as global pools (whole vectors of
    channels), then one elementwise stage.  Padding channels (zeros, zero scale and shift) stay 0."""
    mean = global_pool_blocked(X, "avg", name="instance_norm.mean")
    deviation = compute(X.shape, lambda n, cb, y, x, ci: (X[n, cb, y, x, ci] - mean[n, cb, 0, 0, ci])
                        * (X[n, cb, y, x, ci] - mean[n, cb, 0, 0, ci]), name="instance_norm.square", tag="elemwise")
    var = global_pool_blocked(deviation, "avg", name="instance_norm.var")
    return compute(X.shape, lambda n, cb, y, x, ci: (X[n, cb, y, x, ci] - mean[n, cb, 0, 0, ci])
                   * lwi.rsqrt(var[n, cb, 0, 0, ci] + const(eps, X.dtype)) * P[0, cb, ci] + P[1, cb, ci],
                   name="instance_norm", tag="elemwise")


def _blocked_concat(parts, counts):
    """The blocked maps ``parts`` (``counts`` channel blocks each) one after another along the channel
    blocks: each output block reads its part, the others' reads guarded off."""
    n, _, h, w, b = parts[0].shape

    def body(nn, cb, y, x, ci):
        value, start = parts[0][nn, cb, y, x, ci], 0
        for part, before in zip(parts[1:], counts):
            start += before
            value = if_then_else(cb >= start, part[nn, cb - start, y, x, ci], value)
        return value
    return compute((n, sum(counts), h, w, b), body, name="concat", tag="injective")


def _linear_taps(s: int, asymmetric: bool):
    """For each ``r = y % s`` of a whole factor ``s``: (offset of the first tap from ``y // s``, weight
    of the second).  Half-pixel: source ``(y + 0.5) / s - 0.5``; asymmetric: ``y / s``."""
    taps = []
    for r in range(s):
        c = r / s if asymmetric else (r + 0.5) / s - 0.5
        fl = math.floor(c)
        taps.append((fl, c - fl))
    return taps


#: Resize coordinate transformations that linear up-sampling by whole factors compiles once for
LINEAR_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")


def _linear_upsample(sh: int, sw: int, transform: str):
    """``make`` of a bilinear up-sampling of a blocked map by whole factors (``resize``'s linear mode)."""
    def clamp(i, size):
        return binary("min", binary("max", i, const(0, "int64")), size - 1)

    def per_axis(v, s, size):
        """(first tap index, second tap index, second tap's weight) of output coordinate ``v``."""
        if transform == "align_corners":
            # onnxruntime's float32 arithmetic: float(v * (size - 1)) / float(size * s - 1), and 0
            # where the output is one pixel
            out = size * s
            ratio = cast("float32", v * (size - 1)) / cast("float32", binary("max", out - 1, const(1, "int64")))
            coordinate = select(out > 1, ratio, const(0.0, "float32"))
            first = lwi.floor(coordinate)
            return clamp(cast("int64", first), size), clamp(cast("int64", first) + 1, size), coordinate - first
        taps = _linear_taps(s, transform == "asymmetric")
        r = v % s
        offset, weight = const(taps[-1][0], "int64"), const(float(taps[-1][1]), "float32")
        for k in range(s - 1):        # a select per residue (s is a small whole factor)
            offset = select(r == k, const(taps[k][0], "int64"), offset)
            weight = select(r == k, const(float(taps[k][1]), "float32"), weight)
        first = v // s + offset
        return clamp(first, size), clamp(first + 1, size), weight

    def make(t, extent):
        n, cb, h, w, ci = t.shape

        def value(nn, c, y, xx, i):
            y0, y1, fy = per_axis(y, sh, h)
            x0, x1, fx = per_axis(xx, sw, w)
            one = const(1.0, "float32")
            top = t[nn, c, y0, x0, i] * (one - fx) + t[nn, c, y0, x1, i] * fx
            bottom = t[nn, c, y1, x0, i] * (one - fx) + t[nn, c, y1, x1, i] * fx
            return top * (one - fy) + bottom * fy
        return compute((n, cb, h * sh, w * sw, ci), value, name="upsample_linear", tag="injective")
    return make


def _conv_key(depthwise: bool, stride, padding, dilation, has_bias: bool, winograd: bool, structure,
              groups: int = 1) -> tuple:
    """A blocked conv kernel's structural key: an up-convolution's 1x1 conv and a plain one share
    their kernel where these (and the argument shapes) agree.  ``groups`` (of a grouped conv) joins
    the key only when not 1, so the keys of saved executables' other kernels stay as they were."""
    key = ("depthwise" if depthwise else "conv", stride, padding, dilation, has_bias, winograd, structure)
    return key if groups == 1 else key + (groups,)


def _blocked_depth_to_space(Z, kh: int, kw: int, out_blocks: int):
    """Z [N, KH*KW*OCb, H, W, b] (channel blocks tap-major) -> Y [N, OCb, H*KH, W*KW, b]: output pixel
    (y, x) is tap (y % KH, x % KW) of input pixel (y // KH, x // KW), a whole channel vector."""
    n, _, h, w, block = Z.shape
    return compute((n, out_blocks, h * kh, w * kw, block),
                   lambda nn, ob, y, x, ci: Z[nn, ((y % kh) * kw + x % kw) * out_blocks + ob, y // kh, x // kw, ci],
                   name="depth_to_space", tag="injective")


# ---------------------------------------------------------------------- epilogue nodes
def _epilogue_node(node, internal, shape, blocked, b) -> bool:
    """Whether ``node`` can run in a conv kernel's epilogue: elementwise over ``shape``, reading
    the kernel's own values, scalar constants and blocked values of that shape."""
    if node.op_type == "Clip":
        if _clip_bounds(node, b) is None:
            return False
    elif node.op_type not in BINARY and node.op_type not in UNARY and node.op_type not in WITH_ATTRS:
        return False
    out = node.output[0]
    if out not in b.shapes.shapes or not _same(b.shapes.shapes[out], shape) or b.dtype(out) != "float32":
        return False
    return all(i in internal or b.is_scalar(i) or (i in blocked and _same(b.shapes.shapes[i], shape))
               for i in _data_inputs(node))


def _data_inputs(node) -> list:
    """The inputs an epilogue node computes on (a Clip's bounds are constants, read at build)."""
    return [i for i in node.input[:1 if node.op_type == "Clip" else None] if i]


def _epilogue_plan(steps, anchors, b):
    """(the blocked values the epilogue ``steps`` read besides the kernel's own values (``anchors``,
    the names of its anchor's result, and the steps' results) and scalars, the steps' structure for
    the kernel's key: each operand as which own value, which external, or which scalar it is)."""
    own = {name: 0 for name in anchors}
    own.update((m.output[0], k + 1) for k, m in enumerate(steps))
    externals = []
    for m in steps:
        for i in _data_inputs(m):
            if i not in own and not b.is_scalar(i) and i not in externals:
                externals.append(i)

    def operand(name):
        if name in own:
            return ("int", own[name])
        if b.is_scalar(name):
            return ("c", b.scalar(name))
        return ("ext", externals.index(name)) if name in externals else ("bound",)
    structure = tuple((m.op_type, _clip_bounds(m, b) if m.op_type == "Clip" else node_params(m),
                       tuple(operand(i) for i in m.input if i)) for m in steps)
    return externals, structure


def _with_epilogue(Y, steps, anchor_names, externals, b):
    """``(Y with the epilogue steps applied, the placeholders of the externals)``: those are made in
    Y's own sizes (``_Builder.kernel``'s ``own_inputs``)."""
    ext = [placeholder(Y.shape, name=f"res{q}") for q in range(len(externals))]
    if not steps:
        return Y, ext
    return compute(Y.shape, lambda *idx: _epilogue_value(steps, idx, Y, anchor_names, ext, externals, b),
                   name="epilogue", tag="elemwise"), ext


def _epilogue_value(steps, idx, Y, anchor_names, ext, externals, b):
    """The epilogue ``steps`` at index ``idx``: ``Y`` (the conv, with a folded BatchNormalization)
    stands for each of ``anchor_names``."""
    env = {name: Y[idx] for name in anchor_names}
    last = anchor_names[-1]
    for m in steps:
        args = []
        for i in m.input:
            if not i:
                args.append(None)           # an input left out (a Clip's bound)
            elif i in env:
                args.append(env[i])
            elif i in externals:
                args.append(ext[externals.index(i)][idx])
            else:                           # a scalar constant (a Clip's bounds too: _epilogue_node)
                args.append(const(b.scalar(i), "float32"))
        env[m.output[0]] = _apply(m, args)
        last = m.output[0]
    return env[last]


#: elementwise nodes that map the zeros of padding channels (and any finite value) to finite values
PADDING_SAFE = {"Relu", "Clip", "Add", "Sub", "Mul", "Max", "Min", "Sigmoid", "Tanh", "Neg", "Abs", "Identity",
                "Erf", "LeakyRelu", "HardSigmoid", "HardSwish", "Floor", "Ceil", "Round", "Sign", "Softsign",
                "Softplus", "Mish", "Swish", "Elu", "Selu", "Celu", "ThresholdedRelu", "Shrink", "Gelu", "Sin", "Cos",
                "Atan", "PRelu"}


def _keeps_padding_finite(node, b) -> bool:
    return node.op_type in PADDING_SAFE or (node.op_type == "Div" and len(node.input) > 1 and
                                            b.is_scalar(node.input[1]) and b.scalar(node.input[1]) != 0)


def _conv_bias(node, b) -> Optional[np.ndarray]:
    """A Conv's constant bias as float32, None without one (a computed one is refused by name)."""
    name = optional_input(node, 2)
    if name is not None and name not in b.consts:
        raise b.unsupported("a Conv whose bias is computed")
    return None if name is None else b.consts[name].astype(np.float32)


def _zero_padded(array: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``array`` with zeros appended along ``axis`` up to ``size``."""
    if array.shape[axis] == size:
        return array
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, size - array.shape[axis])
    return np.pad(array, pad)


def _clip_bounds(node, b) -> Optional[tuple]:
    """(low, high) of a Clip with constant bounds (None: that side open), or None if one is computed."""
    bounds = []
    for pos, name in ((1, "min"), (2, "max")):
        if len(node.input) > pos and node.input[pos]:
            if not b.is_scalar(node.input[pos]):
                return None
            bounds.append(b.scalar(node.input[pos]))
        else:
            value = _attr(node, name, None)
            bounds.append(None if value is None else float(value))
    return tuple(bounds)


def _inference_batch_norm(node, b) -> Optional[str]:
    """None where ``node`` is an inference BatchNormalization of constant statistics (a per-channel
    scale and shift), else why not."""
    if int(_attr(node, "training_mode", 0)) or len([o for o in node.output if o]) != 1:
        return "a BatchNormalization in training mode (batch statistics, running-statistics outputs)"
    if not all(i in b.consts for i in node.input[1:5]):
        return "a BatchNormalization with computed statistics"
    return None


def _scale_shift(bn, consts):
    """(a, b) per channel: the inference BatchNormalization ``bn`` is ``x * a + b``."""
    return inference_scale_shift(*(np.asarray(consts[i]).reshape(-1) for i in bn.input[1:5]),
                                 float(_attr(bn, "epsilon", 1e-5)))


def _fold_batch_norm(bn, weight, bias, consts):
    """A convolution's weight and bias with the BatchNormalization after it folded in."""
    scale, shift = _scale_shift(bn, consts)
    base = np.zeros(weight.shape[0], np.float32) if bias is None else bias
    return (weight * scale[:, None, None, None]).astype(np.float32), (base * scale + shift).astype(np.float32)
