"""choose_conv_layout: CPU convolution networks keep their activations in the blocked layout.

A conv2d on NCHW computes in NCHW[b]c blocks and transposes its result back (and the
next layer reads NCHW again); depthwise convolutions and pools on NCHW vectorize along a
row that is 7 to 14 pixels wide late in a network.  This pass rewrites the convolution
part of the graph to the blocked layout [N, C/b, H, W, b] (``nn_ops/ops/nchwc.py``):

* conv2d with a constant weight and groups == 1 -> ``conv2d_blocked`` (weights packed
  here, once); its input may be plain NCHW (the first layer reads the image as it is);
  a 3x3 stride-1 one on a blocked input where Winograd pays (``winograd.winograd_pays``)
  -> ``conv2d_winograd_blocked``, its weight transformed here, once (on a map of symbolic size,
  where it pays on some maps, with the packed direct weight too: ``direct_weight``, the kernel
  of each binding picked at run time);
* depthwise conv2d with a constant weight -> ``depthwise_blocked``; another grouped one on a blocked
  input -> ``conv2d_blocked`` with groups of whole channel blocks (``nchwc.merged_groups``: RegNet's and
  ResNeXt's groups of 8 channels merged in pairs into 16-channel blocks, their weight zero between);
* elementwise ops whose tensor operands all come blocked (bias, residual add, relu,
  clip; an operand may be a per-channel (N, C, 1, 1) one, as squeeze-excitation's scale, or a
  per-channel constant, as an unfolded batch norm's, which is blocked here once), channel
  concatenations of values blocked alike (DenseNet's, SqueezeNet's: a concat of the 5-d twins on
  their channel-block axis; a plain input among them, as U-Net's up-sampled half, gets a
  to_blocked), slices of whole channel blocks (YOLO's C2f Split), max and average pools, global average pools and
  resizes of height and width (a U-Net's or an FPN's up-sampling: the same index and weight
  tables, on axes 2 and 3 of the blocked twin), pads of height and width (a style-transfer net's
  reflection padding before each conv), and means or maxima over height and width kept as
  (N, C, 1, 1) (an instance norm's statistics, as global pools) follow their input into the
  blocked layout;
* a Transpose to NHWC of a blocked value (ConvNeXt's, before its channels-last LayerNorm) reads
  the blocked twin: one transpose to [N, H, W, C/b, b], which is [N, H, W, C] as it lies;
* a value needed in NCHW (by any other op, or as a graph output) gets one
  ``from_blocked`` right after it is computed; a depthwise input that only exists in
  NCHW gets one ``to_blocked``.  Transforms sit at the edges of the blocked region, once
  per value, never per layer;
* a conv larger than 1x1 reading an NCHW value with at least ``TO_BLOCKED_MIN_CHANNELS``
  channels (whole vectors of them) gets one ``to_blocked`` of it; others (a first layer's image,
  1x1 convs) read the value as it lies;
* a conv (depthwise with output rows of a constant 8 pixels or more, or a stride-1 1x1 cheaper
  plain than blocked with its from_blocked, ``lone_1x1_stays_plain``) whose input is NCHW
  stays NCHW unless its result reaches a convolution or an NHWC transpose (through elementwise
  ops, pools and concats) or joins a blocked value in an elementwise op: a lone one would pay a
  from_blocked (and a depthwise a to_blocked) around one kernel (depthwise 144 channels at
  56x56: 368 us blocked with both transforms, 107 us in NCHW; 1x1 16->96 at 112x112: 1.32 ms
  blocked, 0.40 ms NCHW).

The block of a value with C channels is the vector width (16 floats with AVX-512) when
it divides C, else 8 when that does (MobileNetV2's 24 channels), else the value stays
NCHW.  A conv's result whose padding nothing would read as data (``_pad_safe``: channel-local
ops, convs and depthwise convs, finite elementwise ops of operands padded alike; SqueezeNet's
1000-way classifier, MobileNetV2's 24 channels) takes the vector width anyway, its channels padded
to whole vectors by zero weights and bias (zero input-channel weights in the convs that read it);
the ``from_blocked`` that leaves the blocked layout drops the padding (its ``channels``
attribute).  Accepts a graph after fold_batch_norm; guarantees the same values.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ...ops.conv2d import _divisor_at_most
from .. import symbolic as S
from ..graph import Graph, Node
from ..op_table import SCALAR_OPS, scalar_constants
from ...ops.nchwc import blocked_shape, group_merge, merged_groups, pack_blocked_weight, pack_depthwise_weight
from ...ops.winograd import MIN_WINOGRAD_PIXELS, winograd_pays, winograd_weight
from .blocked_qconv import (QCONVS, QUANTIZERS, blocked_qconv, follows_blocked, input_block, is_quantizer_constant,
                            qconv_goes_blocked)
from .lone_1x1_stays_plain import lone_1x1_stays_plain
from .sink_reshapes import ELEMENTWISE


def channel_block(channels: int, lanes: int) -> Optional[int]:
    for b in (lanes, 8):
        if b <= lanes and channels % b == 0:
            return b
    return None


def _is_float4d(g: Graph, name: str) -> bool:
    v = g.values[name]
    return len(v.shape) == 4 and v.dtype == "float32"


def choose_conv_layout(g: Graph, lanes: Optional[int] = None, target=None) -> Graph:
    """``lanes`` (float32 vector lanes) and ``target`` (whose FMA rate and caches say where Winograd
    pays: ``winograd.winograd_largest_map``) default to the host's."""
    from ....target import resolve_target
    target = resolve_target(target)
    lanes = target.lanes("float32") if lanes is None else lanes
    block: Dict[str, int] = {}                # plain value name -> block of its blocked twin
    padded: Dict[str, int] = {}               # ... -> its twin's channel count, where that is padded
    plan: Dict[int, str] = {}                 # id(node) -> how it is rewritten
    users = g.consumer_map()                  # the graph is not changed until every node is decided
    for node in g.nodes:
        how = _decide(g, node, block, lanes, users, target, padded)
        if how:
            plan[id(node)] = how
            out = node.outputs[0]
            block[out] = channel_block(g.shape(out)[1], lanes) if how not in ("global_pool", "to_nhwc") else 0
            channels = g.shape(out)[1]
            # (fewer channels than a vector keep their blocks of 8: padded, the convs reading them
            # would do twice the reduction)
            if how in ("conv", "conv_plain_input") and channels > lanes and channels % lanes and \
                    _pad_safe(g, out, users):
                block[out], padded[out] = lanes, -(-channels // lanes) * lanes
            elif how in ("elementwise", "pool", "depthwise", "resize", "spatial_pad") and \
                    any(i in padded for i in node.inputs):
                block[out], padded[out] = lanes, next(padded[i] for i in node.inputs if i in padded)
    if not plan:
        return g
    twin = {v: g.fresh_name(v + ".blk") for v, b in block.items() if b}
    new_nodes = []
    to_blocked_done = {}

    def blocked_input(name: str, b: Optional[int] = None) -> str:
        """The blocked twin of ``name``, made by one to_blocked (of block ``b``, by default the channels'
        own) the first time a plain value needs it."""
        if name in twin and block.get(name):
            return twin[name]
        if name not in to_blocked_done:
            b = b or channel_block(g.shape(name)[1], lanes)
            made = g.fresh_name(name + ".blk")
            g.add_value(made, blocked_shape(g.shape(name), b), g.values[name].dtype)
            new_nodes.append(Node("to_blocked", [name], [made], {"block": b}, made))
            to_blocked_done[name] = made
        return to_blocked_done[name]

    for node in g.nodes:
        how = plan.get(id(node))
        if how is None:
            new_nodes.append(node)
            continue
        out = node.outputs[0]
        if how == "global_pool":
            pooled = g.fresh_name(out + ".blk")
            b = block[node.inputs[0]]
            n, c = g.shape(out)[:2]
            g.add_value(pooled, (n, padded.get(node.inputs[0], c) // b, 1, 1, b), g.values[out].dtype)
            new_nodes.append(Node("global_avg_pool_blocked", [twin[node.inputs[0]]], [pooled], {}, node.name))
            new_nodes.append(Node("from_blocked", [pooled], [out], {"channels": c}, out + ".plain"))
            continue
        if how == "to_nhwc":        # [N, C/b, H, W, b] -> [N, H, W, C/b, b], viewed as [N, H, W, C]
            moved = g.fresh_name(out + ".nhwcb")
            n, c, h, w = g.shape(node.inputs[0])
            b = block[node.inputs[0]]
            g.add_value(moved, (n, h, w, c // b, b), g.values[out].dtype)
            new_nodes.append(Node("transpose", [twin[node.inputs[0]]], [moved], {"perm": (0, 2, 3, 1, 4)}, node.name))
            new_nodes.append(Node("reshape", [moved], [out], {"shape": (n, h, w, c)}, out + ".view"))
            continue
        b = block[out]
        n, c, h, w = g.shape(out)
        g.add_value(twin[out], (n, padded.get(out, c) // b, h, w, b), g.values[out].dtype)
        new_nodes.append(_rewrite(g, node, how, b, twin, block, blocked_input, lanes, target, padded.get(out),
                                  to_blocked_done))
        # every rewritten reader takes the blocked twin; anything else (and a graph output) needs NCHW
        if out in g.outputs or any(id(u) not in plan for u in users.get(out, [])):
            new_nodes.append(Node("from_blocked", [twin[out]], [out], {"channels": c}, out + ".plain"))
    g.nodes = new_nodes
    return g


def _spatial_reduce(g: Graph, node: Node) -> bool:
    """A mean or maximum over height and width, kept as (N, C, 1, 1): an instance norm's statistics
    (the static path writes InstanceNormalization as such means and elementwise ops), computed on the
    blocked twin as a global pool, so the normalisation around them stays blocked too."""
    nd = len(g.shape(node.inputs[0]))
    return _is_float4d(g, node.inputs[0]) and node.attrs["kind"] in ("mean", "max") and node.attrs.get("keepdims", True) \
        and {a % nd for a in node.attrs["axes"]} == {2, 3}


def _per_channel(shape, out_shape) -> bool:
    """(N, C, 1, 1) against an (N, C, H, W) output: squeeze-excitation's channel scale, whose blocked
    twin (N, C/b, 1, 1, b) broadcasts against the blocked (N, C/b, H, W, b) as the plain one does."""
    return len(shape) == 4 and tuple(shape[:2]) == tuple(out_shape[:2]) and tuple(shape[2:]) == (1, 1)


def _channel_slice(g: Graph, node: Node, b: int, lanes: int) -> bool:
    """Whether ``slice`` ``node`` cuts whole ``b``-channel blocks of a 4-d value and nothing else (the
    halves of YOLO's C2f Split), its result blocked alike: it is then the slice of the blocked twin's
    channel-block axis (a view of one image's, ``slices_as_views``)."""
    shape, attrs = g.shape(node.inputs[0]), node.attrs
    if len(shape) != 4 or tuple(attrs["step"]) != (1, 1, 1, 1):
        return False
    begin, end = tuple(attrs["begin"]), tuple(attrs["end"])
    whole = all(begin[k] == 0 and end[k] == shape[k] for k in (0, 2, 3))
    return whole and begin[1] % b == 0 and end[1] % b == 0 and channel_block(end[1] - begin[1], lanes) == b


def _decide(g: Graph, node: Node, block, lanes, users, target, padded=()) -> Optional[str]:
    """How ``node`` is rewritten to the blocked layout, or None; ``target``: the CPU compiled for (its
    lanes and registers weigh a lone 1x1's forms); ``padded``: the values whose twins carry padding
    channels."""
    op = node.op_type
    if op == "conv2d":
        x, w = node.inputs[0], node.inputs[1]
        weight = g.initializers.get(w)
        if weight is None or weight.ndim != 4 or not _is_float4d(g, x):
            return None
        oc, cg = weight.shape[:2]
        c = g.shape(x)[1]
        groups = int(node.attrs["groups"])
        if channel_block(oc, lanes) is None:
            return None
        if groups == c == oc and cg == 1:
            if block.get(x):
                return "depthwise"
            width = g.shape(node.outputs[0])[3]
            lone_nchw = S.is_static(width) and width >= LONE_DEPTHWISE_BLOCKED_WIDTH
            return "depthwise" if channel_block(c, lanes) and (
                not lone_nchw or _reaches_conv(node.outputs[0], users, block)) else None
        if groups != 1:     # groups of whole blocks (small ones merged: ResNeXt's, RegNet's) on a blocked input
            return "grouped_conv" if block.get(x) and x not in padded and group_merge(
                weight.shape, groups, block[x], channel_block(oc, lanes)) is not None else None
        if block.get(x):
            return "conv"
        lone_nchw = weight.shape[2:] == (1, 1) and lone_1x1_stays_plain(
            c, oc, g.shape(node.outputs[0]), node.attrs.get("stride", (1, 1)), target)
        return "conv_plain_input" if not lone_nchw or _reaches_conv(node.outputs[0], users, block) else None
    if op in QCONVS:
        return "qconv" if qconv_goes_blocked(g, node, block, padded, lambda c: channel_block(c, lanes)) else None
    if op in QUANTIZERS and follows_blocked(g, node, block, padded):
        return "elementwise"
    if op in ("max_pool2d", "avg_pool2d") and block.get(node.inputs[0]):
        return "pool"
    if op == "global_avg_pool" and block.get(node.inputs[0]):
        return "global_pool"
    if op == "reduce" and block.get(node.inputs[0]) and node.inputs[0] not in padded and _spatial_reduce(g, node):
        return "spatial_reduce"     # (not of a padded twin: its pooled padding would be read back as data)
    if op in ("pad", "pad_index") and block.get(node.inputs[0]) and _is_float4d(g, node.inputs[0]) \
            and not any(node.attrs["before"][:2]) and not any(node.attrs["after"][:2]):
        return "spatial_pad"
    if op == "resize" and block.get(node.inputs[0]) and set(node.attrs["axes"]) <= {2, 3}:
        return "resize"
    if op == "transpose" and block.get(node.inputs[0]) and tuple(node.attrs["perm"]) == (0, 2, 3, 1):
        return "to_nhwc"
    if op == "concat" and _is_float4d(g, node.outputs[0]) and int(node.attrs["axis"]) % 4 == 1:
        blocks = {block[i] for i in node.inputs if block.get(i)}
        b = channel_block(g.shape(node.outputs[0])[1], lanes)
        if blocks == {b} and all(block.get(i) or (_is_float4d(g, i) and g.shape(i)[1] % b == 0)
                                 for i in node.inputs):
            return "concat"
    if op == "slice" and block.get(node.inputs[0]) and node.inputs[0] not in padded and \
            _channel_slice(g, node, block[node.inputs[0]], lanes):
        return "channel_slice"
    if op in ELEMENTWISE:
        out_shape = g.shape(node.outputs[0])
        scalars = scalar_constants(g, op, node.inputs) if op in SCALAR_OPS else {}
        tensors = [i for k, i in enumerate(node.inputs) if k not in scalars and not _channel_constant(g, i, out_shape)]
        if tensors and all(block.get(i) and (g.shape(i) == out_shape or _per_channel(g.shape(i), out_shape))
                           for i in tensors) \
                and len({block[i] for i in tensors}) == 1 and any(g.shape(i) == out_shape for i in tensors):
            return "elementwise"
    return None


#: a lone depthwise conv on an NCHW value whose output rows are narrower than this goes blocked all the
#: same: in NCHW its rows are a vector of 4 and one of 3 (strided loads and shuffles at stride 2),
#: blocked each tap is one whole vector; the transforms take a plane's rows together (one-node models,
#: Zen 5, 2 threads, interleaved, NCHW time / blocked time with both transforms): 576 channels 14x14
#: stride 2 1.40, 960 at 7x7 1.59; on 14-wide output rows NCHW wins (384 and 576 at 14x14 0.74-0.80,
#: 192 at 28x28 stride 2 0.85)
LONE_DEPTHWISE_BLOCKED_WIDTH = 8


#: a conv larger than 1x1 reading an NCHW value of at least this many channels (whole vectors of
#: them) gets one to_blocked copy of it first; with fewer (a first layer's image) it reads the
#: value as it lies: blocked, a 3x3 can take the Winograd form, and its many taps read the
#: input rows in whole vectors.  A 1x1 reads a plain input as fast (MobileNetV2's 960->320 at 7x7
#: alone, Zen 5: 0.069-0.090 ms plain, 0.096 ms blocked after its to_blocked).
TO_BLOCKED_MIN_CHANNELS = 16

#: ops a blocked value flows through to a later convolution (see ``_reaches_conv``)
_BLOCKED_PASSES = frozenset({"max_pool2d", "avg_pool2d", "concat", "resize", "pad", "pad_index"})


def _reaches_conv(value: str, users, block) -> bool:
    """Whether ``value`` feeds a conv2d, or a transpose to NHWC (which reads a blocked value as it
    lies: ConvNeXt's), directly or through elementwise ops, pools and concats, or meets a value
    already blocked (``block``) in an elementwise op (a residual add: blocked, the join stays in
    the blocked layout).  ``users``: the graph's consumer map."""
    def through(v, u):
        return u.op_type in ELEMENTWISE or u.op_type in _BLOCKED_PASSES
    for v, u, _ in _reached(value, users, through):
        if u.op_type == "conv2d" or (u.op_type == "transpose" and tuple(u.attrs["perm"]) == (0, 2, 3, 1)):
            return True
        if u.op_type in ELEMENTWISE and any(block.get(i) for i in u.inputs if i != v):
            return True
    return False


def _reached(value: str, users, through):
    """(value, user, through(value, user)) for every use of ``value`` and, where ``through``, of the
    user's outputs in turn (each value once).  ``users``: the graph's consumer map."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        for u in users.get(v, []):
            follows = through(v, u)
            yield v, u, follows
            if follows:
                stack.extend(u.outputs)


#: ops that compute each channel from the same channel of their one tensor operand alone (a padded
#: channel stays a padded one)
_CHANNEL_LOCAL = frozenset({"relu", "clip", "sigmoid", "tanh", "max_pool2d", "avg_pool2d", "pad", "pad_index"})


#: elementwise ops that keep finite values finite (padding that became inf or NaN would reach the
#: real channels through a later conv's zero weights: 0 * inf is NaN)
_FINITE_ELEMENTWISE = frozenset({"add", "sub", "mul", "max", "min", "relu", "clip", "sigmoid", "tanh", "leaky_relu",
                                 "hard_sigmoid", "hard_swish", "neg", "erf", "gelu", "swish"})


def _pad_safe(g: Graph, value: str, users) -> bool:
    """Whether ``value``'s blocked twin may carry padding channels up to whole vectors, computed
    from zero weights and bias and never read as data: while it stays blocked it flows only into
    channel-local ops (``_CHANNEL_LOCAL`` with scalar bounds, global average pools), depthwise
    convs (their padding channels get zero filters), convs (zero input-channel weights) and
    elementwise ops that keep values finite (``_FINITE_ELEMENTWISE``) of scalar constants and
    tensors of its shape (blocked with it only when padded alike: a value of this channel count is
    blocked in whole vectors only when padded).  SqueezeNet's 1000-way classifier conv ran in
    8-wide blocks on a 16-lane CPU.  A concat, a transpose or an elementwise op with a per-channel
    constant would read the padding as channels or need it padded too; any op outside the blocked
    layout reads the plain value, whose ``from_blocked`` drops the padding."""
    def scalar(i):
        return i in g.initializers and g.initializers[i].size == 1

    def through(v, u):
        op = u.op_type
        if op == "conv2d":                      # depthwise: a zero filter per padding channel
            return u.inputs[0] == v and int(u.attrs["groups"]) == g.shape(v)[1]
        if op in _CHANNEL_LOCAL:
            return u.inputs[0] == v and all(scalar(i) for i in u.inputs[1:] if i)
        if op == "resize":                      # weighted sums within a channel: zeros stay zeros
            return u.inputs[0] == v
        return op in _FINITE_ELEMENTWISE and all(
            scalar(i) or (i not in g.initializers and g.shape(i) == g.shape(v)) for i in u.inputs if i)
    for v, u, follows in _reached(value, users, through):
        op = u.op_type
        if follows or op == "global_avg_pool" or (
                op == "conv2d" and u.inputs[0] == v and v not in u.inputs[1:] and int(u.attrs["groups"]) == 1):
            continue                            # padded alike / leaves the layout / reads it through zeros
        if op in ELEMENTWISE or op in ("conv2d", "concat", "transpose"):
            return False
    return True


def _padded_inputs(weight: np.ndarray, channels: int) -> np.ndarray:
    """A conv's weight [OC, C, ...] with zero input channels appended up to ``channels``."""
    extra = np.zeros((weight.shape[0], channels - weight.shape[1]) + weight.shape[2:], weight.dtype)
    return np.concatenate([weight, extra], axis=1)


def _padded_channels(weight: np.ndarray, bias: Optional[np.ndarray], channels: int):
    """A conv's weight [OC, ...] and bias [OC] with zero output channels appended up to ``channels``."""
    extra = channels - weight.shape[0]
    weight = np.concatenate([weight, np.zeros((extra,) + weight.shape[1:], weight.dtype)])
    if bias is not None:
        bias = np.concatenate([bias.reshape(-1), np.zeros(extra, bias.dtype)])
    return weight, bias


def _channel_constant(g: Graph, name: str, out_shape) -> bool:
    """A constant of shape (C, 1, 1) or (1, C, 1, 1) against a 4-d (N, C, H, W) output (an unfolded
    batch norm's scale and shift, DenseNet's BN-ReLU before each conv): it is blocked here, once."""
    value = g.initializers.get(name)
    return value is not None and len(out_shape) == 4 and value.ndim in (3, 4) and value.size == out_shape[1] \
        and value.shape[-3] == out_shape[1] and value.shape[-2:] == (1, 1)


def _rewrite(g: Graph, node: Node, how: str, b: int, twin, block, blocked_input, lanes, target=None,
             padded_to: Optional[int] = None, made_blocked=()) -> Node:
    """``padded_to``: the channel count of the result's blocked twin where it is padded;
    ``made_blocked``: the plain values a to_blocked already copies (a 1x1 conv reads that copy)."""
    out = twin[node.outputs[0]]
    attrs = node.attrs
    if how == "grouped_conv":
        weight, groups = merged_groups(g.initializers[node.inputs[1]], int(attrs["groups"]), block[node.inputs[0]], b)
        w_name = g.fresh_name(node.inputs[1] + ".blocked")
        g.add_initializer(w_name, pack_blocked_weight(weight, b, block[node.inputs[0]]))
        return Node("conv2d_blocked", [twin[node.inputs[0]], w_name] + list(node.inputs[2:]), [out],
                    {"stride": tuple(attrs["stride"]), "padding": tuple(attrs["padding"]),
                     "dilation": tuple(attrs["dilation"]), "groups": groups}, node.name)
    if how in ("conv", "conv_plain_input", "depthwise"):
        weight = g.initializers[node.inputs[1]]
        extra = list(node.inputs[2:])
        if padded_to:       # output channels padded (a depthwise: its input's padding, a filter each)
            bias = g.initializers[extra[0]] if extra and extra[0] else None
            weight, bias = _padded_channels(weight, bias, padded_to)
            if bias is not None:
                extra[0] = g.fresh_name(extra[0] + ".padded")
                g.add_initializer(extra[0], bias)
    if how in ("conv", "conv_plain_input"):
        x = node.inputs[0]
        c = weight.shape[1]
        if how == "conv":
            x_in, cb = twin[x], block[x]
            if g.shape(x_in)[1] * cb > c:
                weight = _padded_inputs(weight, g.shape(x_in)[1] * cb)      # the input's padding
                c = weight.shape[1]
        elif c >= TO_BLOCKED_MIN_CHANNELS and c % lanes == 0 and (weight.shape[2:] != (1, 1) or x in made_blocked):
            x_in, cb = blocked_input(x, lanes), lanes          # one to_blocked copy, as any blocked input
        else:
            x_in, cb = x, _divisor_at_most(c, 8)               # read as it lies
        w_name = g.fresh_name(node.inputs[1] + ".blocked")
        out_hw = g.shape(node.outputs[0])[2:]
        if x_in != x and winograd_pays(weight.shape[2:], attrs["stride"], attrs["dilation"],
                                       out_hw if all(S.is_static(d) for d in out_hw) else (1, MIN_WINOGRAD_PIXELS),
                                       c, weight.shape[0], target):
            g.add_initializer(w_name, winograd_weight(weight, b, cb))
            if all(S.is_static(d) for d in out_hw):
                return Node("conv2d_winograd_blocked", [x_in, w_name] + extra, [out],
                            {"padding": tuple(attrs["padding"])}, node.name)
            # a map of symbolic size: the direct weight too, for the sizes where Winograd does not pay
            direct = g.fresh_name(node.inputs[1] + ".direct")
            g.add_initializer(direct, pack_blocked_weight(weight, b, cb))
            return Node("conv2d_winograd_blocked", [x_in, w_name, direct] + extra, [out],
                        {"padding": tuple(attrs["padding"]), "direct_weight": True}, node.name)
        g.add_initializer(w_name, pack_blocked_weight(weight, b, cb))
        inputs = [x_in, w_name] + extra
        return Node("conv2d_blocked", inputs, [out], {"stride": tuple(attrs["stride"]),
                                                      "padding": tuple(attrs["padding"]),
                                                      "dilation": tuple(attrs["dilation"])}, node.name)
    if how == "depthwise":
        w_name = g.fresh_name(node.inputs[1] + ".blocked")
        g.add_initializer(w_name, pack_depthwise_weight(weight, b))
        return Node("depthwise_blocked", [blocked_input(node.inputs[0]), w_name] + extra, [out],
                    {"stride": tuple(attrs["stride"]), "padding": tuple(attrs["padding"]),
                     "dilation": tuple(attrs["dilation"])}, node.name)
    if how == "qconv":
        x = node.inputs[0]
        xb = block.get(x) or input_block(node, g.shape(x)[1], lambda c: channel_block(c, lanes))
        return blocked_qconv(g, node, out, blocked_input(x, xb), xb, b)
    if how == "resize":         # the tables index height and width, axes 2 and 3 of either layout
        return Node("resize", [twin[node.inputs[0]]] + list(node.inputs[1:]), [out], dict(attrs), node.name)
    if how == "spatial_pad":    # height and width padded: axes 2 and 3 of either layout
        return Node(node.op_type, [twin[node.inputs[0]]], [out],
                    dict(attrs, before=tuple(attrs["before"]) + (0,), after=tuple(attrs["after"]) + (0,)), node.name)
    if how == "spatial_reduce":
        return Node("global_avg_pool_blocked", [twin[node.inputs[0]]], [out],
                    {"kind": "avg" if attrs["kind"] == "mean" else "max"}, node.name)
    if how == "pool":
        return Node("pool2d_blocked", [twin[node.inputs[0]]], [out],
                    dict(attrs, pool_type="max" if node.op_type == "max_pool2d" else "avg"), node.name)
    if how == "concat":
        return Node("concat", [blocked_input(i, b) for i in node.inputs], [out], {"axis": 1}, node.name)
    if how == "channel_slice":
        (n0, c0, h0, w0), (n1, c1, h1, w1) = attrs["begin"], attrs["end"]
        cut = {"begin": (n0, c0 // b, h0, w0, 0), "end": (n1, c1 // b, h1, w1, b), "step": (1,) * 5}
        return Node("slice", [twin[node.inputs[0]]], [out], cut, node.name)
    # elementwise: blocked operands; scalar constants stay as they are, per-channel ones are blocked
    scalars = scalar_constants(g, node.op_type, node.inputs) if node.op_type in SCALAR_OPS else {}
    out_shape = g.shape(node.outputs[0])
    inputs = []
    for k, i in enumerate(node.inputs):
        if k in scalars or is_quantizer_constant(node, k):
            inputs.append(i)
        elif _channel_constant(g, i, out_shape):
            value = g.initializers[i].reshape(-1)
            name = g.fresh_name(i + ".blk")
            g.add_initializer(name, np.ascontiguousarray(value.reshape(1, value.size // b, 1, 1, b)))
            inputs.append(name)
        else:
            inputs.append(twin[i])
    return Node(node.op_type, inputs, [out], dict(attrs), node.name)


