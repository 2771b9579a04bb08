"""The convolutional networks of the wider zoo (``model_zoo`` re-exports them): SqueezeNet 1.1,
an EfficientNet-style CNN with squeeze-excitation, a ConvNeXt-style stack, a DenseNet, a U-Net, the
fast neural style network (instance norms, reflection padding), ShuffleNetV2 (channel shuffles),
Inception-v3 (factorized 1x7 / 7x1 convolutions, average-pool branches) and ResNet-50 (bottlenecks).

Each builder's defaults are the full-size network at batch 1 (the benchmark); smaller keyword
arguments give the test variants (``model_zoo.SMALL``).  Input ``"input"`` is (batch, 3, size, size).
"""
from __future__ import annotations

import numpy as np

from .onnx_builder import OnnxBuilder


def squeezenet1_1(batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0):
    """torchvision's ``squeezenet1_1``: Fire modules (1x1 squeeze, parallel 1x1 and 3x3 expands joined
    by a channel Concat), ceil-mode max pools, and a 1x1 conv classifier + global average pool."""
    b = OnnxBuilder(seed)

    def conv_relu(x, cin, cout, k, stride=1, pad=0):
        return b.relu(b.conv(x, cin, cout, k, stride=stride, pad=pad, bias=True))

    def fire(x, cin, squeeze, expand):
        s = conv_relu(x, cin, squeeze, 1)
        return b.node("Concat", [conv_relu(s, squeeze, expand, 1), conv_relu(s, squeeze, expand, 3, pad=1)], axis=1)

    def pool(x):
        return b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=1)

    x = pool(conv_relu("input", 3, 64, 3, stride=2))
    x = fire(fire(x, 64, 16, 64), 128, 16, 64)
    x = pool(x)
    x = fire(fire(x, 128, 32, 128), 256, 32, 128)
    x = pool(x)
    for cin, s, e in ((256, 48, 192), (384, 48, 192), (384, 64, 256), (512, 64, 256)):
        x = fire(x, cin, s, e)
    x = b.node("GlobalAveragePool", [conv_relu(x, 512, classes, 1)])
    out = b.node("Flatten", [x], axis=1)
    return b.model((batch, 3, size, size), out, (batch, classes), name="squeezenet1_1")


# EfficientNet-B0's stages: (expansion, kernel, stride, channels, repeats)
_EFFICIENTNET_B0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                    (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def efficientnet_lite(batch: int = 1, size: int = 224, classes: int = 1000, act: str = "silu",
                      stages=_EFFICIENTNET_B0, stem: int = 32, head: int = 1280, seed: int = 0):
    """EfficientNet-B0-shaped CNN: MBConv blocks (1x1 expand, kxk depthwise, squeeze-excitation
    GlobalAveragePool -> 1x1 conv -> act -> 1x1 conv -> Sigmoid -> Mul, 1x1 project, residual), with
    ``act`` "silu" (x * Sigmoid(x), as torch exports ``nn.SiLU``) or "hardswish" (``HardSwish``)."""
    b = OnnxBuilder(seed, opset=14 if act == "hardswish" else 13)
    activate = b.silu if act == "silu" else b.hardswish
    x = activate(b.bn(b.conv("input", 3, stem, 3, stride=2), stem))
    cin = stem
    for t, k, s, c, n in stages:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = activate(b.bn(b.conv(y, cin, hidden, 1, pad=0), hidden))
            y = activate(b.bn(b.conv(y, hidden, hidden, k, stride=stride, groups=hidden), hidden))
            squeeze = max(1, cin // 4)
            se = b.node("GlobalAveragePool", [y])
            se = activate(b.conv(se, hidden, squeeze, 1, pad=0, bias=True))
            se = b.node("Sigmoid", [b.conv(se, squeeze, hidden, 1, pad=0, bias=True)])
            y = b.node("Mul", [y, se])
            y = b.bn(b.conv(y, hidden, c, 1, pad=0), c)
            x = b.node("Add", [y, x]) if stride == 1 and cin == c else y
            cin = c
    x = activate(b.bn(b.conv(x, cin, head, 1, pad=0), head))
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model((batch, 3, size, size), b.gemm(x, head, classes), (batch, classes), name="efficientnet_lite")


def convnext(batch: int = 1, size: int = 224, classes: int = 1000, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768),
             seed: int = 0):
    """ConvNeXt-T-shaped stack at opset 17: 4x4/4 stem and 2x2/2 downsamples with the channels-first
    LayerNorm written out (ReduceMean formula); blocks of 7x7 depthwise conv, Transpose to NHWC,
    LayerNormalization, Linear (MatMul + Add) 4x, GELU, Linear, layer scale Mul, Transpose back, residual
    Add; global average pool, LayerNormalization, Gemm."""
    b = OnnxBuilder(seed, opset=17)
    x = b.layer_norm_channels_first(b.conv("input", 3, dims[0], 4, stride=4, pad=0, bias=True), dims[0])
    for stage, (depth, dim) in enumerate(zip(depths, dims)):
        if stage:
            x = b.conv(b.layer_norm_channels_first(x, dims[stage - 1]), dims[stage - 1], dim, 2, stride=2, pad=0,
                       bias=True)
        for _ in range(depth):
            y = b.conv(x, dim, dim, 7, pad=3, groups=dim, bias=True)
            y = b.node("Transpose", [y], perm=[0, 2, 3, 1])
            y = b.layer_norm(y, dim, eps=1e-6)
            y = b.matmul_add(b.gelu(b.matmul_add(y, dim, 4 * dim)), 4 * dim, dim)
            y = b.node("Mul", [y, b.init("gamma", b.weight(dim, 0.5))])
            y = b.node("Transpose", [y], perm=[0, 3, 1, 2])
            x = b.node("Add", [x, y])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    x = b.layer_norm(x, dims[-1], eps=1e-6)
    return b.model((batch, 3, size, size), b.gemm(x, dims[-1], classes), (batch, classes), name="convnext")


def densenet(batch: int = 1, size: int = 224, classes: int = 1000, blocks=(6, 12, 24, 16), growth: int = 32,
             stem: int = 64, seed: int = 0):
    """DenseNet-121 (the defaults): dense layers BN-ReLU-Conv1x1(4*growth)-BN-ReLU-Conv3x3(growth), each
    Concat-ed onto the growing feature map; transitions BN-ReLU-Conv1x1(half)-AveragePool."""
    b = OnnxBuilder(seed)
    x = b.relu(b.bn(b.conv("input", 3, stem, 7, stride=2, pad=3), stem))
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = stem
    for i, n in enumerate(blocks):
        features = [x]
        for _ in range(n):
            cat = features[0] if len(features) == 1 else b.node("Concat", features, axis=1)
            y = b.conv(b.relu(b.bn(cat, c)), c, 4 * growth, 1, pad=0)
            y = b.conv(b.relu(b.bn(y, 4 * growth)), 4 * growth, growth, 3)
            features.append(y)
            c += growth
        x = b.node("Concat", features, axis=1)
        if i != len(blocks) - 1:
            x = b.conv(b.relu(b.bn(x, c)), c, c // 2, 1, pad=0)
            x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
            c //= 2
    x = b.node("Flatten", [b.node("GlobalAveragePool", [b.relu(b.bn(x, c))])], axis=1)
    return b.model((batch, 3, size, size), b.gemm(x, c, classes), (batch, classes), name="densenet")


def unet(batch: int = 1, size: int = 256, out_classes: int = 2, base: int = 32, depth: int = 4,
         up: str = "transpose", seed: int = 0):
    """U-Net: double 3x3 conv-BN-ReLU per level, MaxPool down, up by ``up`` = "transpose"
    (ConvTranspose 2x2/2), "nearest", "linear" or "linear_corners" (Resize x2 as torch exports
    ``F.interpolate``, the last with ``align_corners=True``, then a 1x1 conv halving the channels),
    or "linear_sizes" (``F.interpolate(x, size=skip.shape[2:], mode="bilinear")``: Resize to the
    skip's height and width, given as ``sizes`` computed from the shapes, so any input size works),
    skip Concat with the encoder level, 1x1 conv head."""
    b = OnnxBuilder(seed)

    def double_conv(x, cin, cout):
        x = b.relu(b.bn(b.conv(x, cin, cout, 3), cout))
        return b.relu(b.bn(b.conv(x, cout, cout, 3), cout))

    def shape_part(tensor, start, end):
        """Shape(tensor)[start:end], as torch exports ``t.shape[start:end]``."""
        return b.node("Slice", [b.node("Shape", [tensor]), b.const([start], np.int64), b.const([end], np.int64),
                                b.const([0], np.int64)])

    x, c, skips = "input", 3, []
    for level in range(depth + 1):
        if level:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        x = double_conv(x, c, base << level)
        c = base << level
        skips.append(x)
    for level in reversed(range(depth)):
        half = base << level
        if up == "transpose":
            x = b.conv_transpose(x, c, half, 2, 2)
        elif up == "linear_sizes":
            sizes = b.node("Concat", [shape_part(x, 0, 2), shape_part(skips[level], 2, 4)], axis=0)
            x = b.node("Resize", [x, "", "", sizes], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
            x = b.conv(x, c, half, 1, pad=0, bias=True)
        else:
            scales = b.const([1.0, 1.0, 2.0, 2.0])
            mode = {"linear": "pytorch_half_pixel", "linear_corners": "align_corners"}.get(up, "asymmetric")
            x = b.node("Resize", [x, "", scales], mode=up.split("_")[0], coordinate_transformation_mode=mode,
                       **({"nearest_mode": "floor"} if up == "nearest" else {}))
            x = b.conv(x, c, half, 1, pad=0, bias=True)
        x = double_conv(b.node("Concat", [skips[level], x], axis=1), 2 * half, half)
        c = half
    out = b.conv(x, c, out_classes, 1, pad=0, bias=True)
    return b.model((batch, 3, size, size), out, (batch, out_classes, size, size), name="unet")


def style_transfer(batch: int = 1, size: int = 256, base: int = 32, residuals: int = 5, seed: int = 0):
    """The fast neural style network (Johnson et al.; PyTorch's ``examples/fast_neural_style``
    ``TransformerNet``): each conv after a ReflectionPad (torch exports ``Pad`` mode reflect), an
    InstanceNormalization with affine parameters after every conv but the last, two stride-2
    convs down, ``residuals`` residual blocks, two nearest 2x up-samplings (``Resize``) up, a 9x9
    conv to 3 channels.  An image in, an image of the same size out."""
    b = OnnxBuilder(seed)

    def conv(x, cin, cout, k, stride=1):
        p = k // 2
        x = b.node("Pad", [x, b.const([0, 0, p, p, 0, 0, p, p], np.int64)], mode="reflect")
        return b.conv(x, cin, cout, k, stride=stride, pad=0, bias=True)

    def norm(x, c):
        return b.node("InstanceNormalization", [x, b.init("in_s", (1.0 + 0.1 * b.rng.standard_normal(c)).astype(np.float32)),
                                                b.init("in_b", (0.1 * b.rng.standard_normal(c)).astype(np.float32))])

    def up(x):
        return b.node("Resize", [x, "", b.const([1.0, 1.0, 2.0, 2.0])], mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    x = b.relu(norm(conv("input", 3, base, 9), base))
    x = b.relu(norm(conv(x, base, 2 * base, 3, stride=2), 2 * base))
    x = b.relu(norm(conv(x, 2 * base, 4 * base, 3, stride=2), 4 * base))
    c = 4 * base
    for _ in range(residuals):
        y = b.relu(norm(conv(x, c, c, 3), c))
        x = b.node("Add", [x, norm(conv(y, c, c, 3), c)])
    x = b.relu(norm(conv(up(x), c, 2 * base, 3), 2 * base))
    x = b.relu(norm(conv(up(x), 2 * base, base, 3), base))
    out = conv(x, base, 3, 9)
    return b.model((batch, 3, size, size), out, (batch, 3, size, size), name="style_transfer")


def resnet50(batch: int = 1, size: int = 224, classes: int = 1000, blocks=(3, 4, 6, 3), width: int = 64,
             groups: int = 1, seed: int = 0):
    """torchvision's ``resnet50`` (the defaults; v1.5: a stage's stride on its first 3x3): bottlenecks of
    1x1 down to the stage's width, 3x3, 1x1 up to four times the stage's planes, and a 1x1 projection
    on the first block's shortcut.  ``groups=32, width=4`` is ``resnext50_32x4d``, ``width=128``
    ``wide_resnet50_2``: the 3x3's width is ``planes * width / 64 * groups``."""
    b = OnnxBuilder(seed)
    x = b.relu(b.bn(b.conv("input", 3, 64, 7, stride=2, pad=3), 64))
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (repeats, planes) in enumerate(zip(blocks, (64, 128, 256, 512))):
        mid, cout = planes * width // 64 * groups, planes * 4
        for unit in range(repeats):
            stride = 2 if unit == 0 and stage > 0 else 1
            y = b.relu(b.bn(b.conv(x, cin, mid, 1), mid))
            y = b.relu(b.bn(b.conv(y, mid, mid, 3, stride=stride, groups=groups), mid))
            y = b.bn(b.conv(y, mid, cout, 1), cout)
            short = x if stride == 1 and cin == cout else b.bn(b.conv(x, cin, cout, 1, stride=stride), cout)
            x = b.relu(b.node("Add", [y, short]))
            cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model((batch, 3, size, size), b.gemm(x, cin, classes), (batch, classes), name="resnet50")


def shufflenet_v2(batch: int = 1, size: int = 224, classes: int = 1000, stages=((116, 4), (232, 8), (464, 4)),
                  stem: int = 24, head: int = 1024, seed: int = 0):
    """torchvision's ``shufflenet_v2_x1_0`` (the defaults): units whose two halves meet in a channel
    Concat and a channel shuffle (Reshape to [N, 2, C/2, H, W], Transpose, Reshape back), the next
    unit Splitting them again; the first unit of a stage has a strided depthwise branch on each side.
    Channel counts of 58, 116 and 232 a half are not whole vectors, so the shuffles stay in NCHW."""
    b = OnnxBuilder(seed)
    x = b.relu(b.bn(b.conv("input", 3, stem, 3, stride=2), stem))
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, side = stem, (size + 3) // 4        # after the stem conv and the pool, both stride 2

    def conv_bn(x, cin, cout, k=1, stride=1, groups=1, relu=True):
        y = b.bn(b.conv(x, cin, cout, k, stride=stride, groups=groups), cout)
        return b.relu(y) if relu else y

    for cout, repeats in stages:
        half = cout // 2
        for unit in range(repeats):
            if unit == 0:           # both halves read the whole input, each down by a strided depthwise
                left = conv_bn(conv_bn(x, cin, cin, 3, 2, groups=cin, relu=False), cin, half)
                right, right_in, stride = x, cin, 2
                side = (side + 1) // 2
            else:
                halves = b.init("split", np.array([half, half], np.int64))
                left, right = b.node("Split", [x, halves], n_out=2, axis=1)
                right_in, stride = half, 1
            right = conv_bn(right, right_in, half)
            right = conv_bn(conv_bn(right, half, half, 3, stride, groups=half, relu=False), half, half)
            y = b.node("Concat", [left, right], axis=1)
            y = b.node("Reshape", [y, b.init("shape", np.array([batch, 2, half, side, side], np.int64))])
            y = b.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
            x = b.node("Reshape", [y, b.init("shape", np.array([batch, cout, side, side], np.int64))])
            cin = cout
    x = conv_bn(x, cin, head)
    x = b.node("ReduceMean", [x], axes=[2, 3], keepdims=0)       # torchvision's x.mean([2, 3])
    return b.model((batch, 3, size, size), b.gemm(x, head, classes), (batch, classes), name="shufflenet_v2")


def inception_v3(batch: int = 1, size: int = 299, classes: int = 1000, width: float = 1.0, blocks_c: int = 4,
                 count_include_pad: int = 1, seed: int = 0):
    """torchvision's ``inception_v3`` without its auxiliary head (the defaults): factorized 1x7 / 7x1
    and 1x3 / 3x1 convolutions, four-branch blocks joined by channel Concats (one branch an average
    pool, ``count_include_pad`` as torch exports it; TensorFlow's models exclude the padding),
    strided grid reductions.  ``width`` scales every channel count (test variants)."""
    b = OnnxBuilder(seed)

    def ch(c):
        return max(8, int(c * width) // 8 * 8)

    def conv(x, cin, cout, kh, kw=None, stride=1, pad=None):
        kw = kh if kw is None else kw
        ph, pw = (kh // 2, kw // 2) if pad is None else (pad, pad)
        w = b.weight((cout, cin, kh, kw), np.sqrt(2.0 / (cin * kh * kw)))
        y = b.node("Conv", [x, b.init("w", w)], kernel_shape=[kh, kw], strides=[stride, stride],
                   pads=[ph, pw, ph, pw])
        return b.relu(b.bn(y, cout))

    def avg_pool(x):
        return b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                      count_include_pad=count_include_pad)

    def max_pool(x):
        return b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])

    def block_a(x, cin, pool):
        b5 = conv(conv(x, cin, ch(48), 1), ch(48), ch(64), 5)
        b3 = conv(conv(conv(x, cin, ch(64), 1), ch(64), ch(96), 3), ch(96), ch(96), 3)
        return b.node("Concat", [conv(x, cin, ch(64), 1), b5, b3, conv(avg_pool(x), cin, pool, 1)], axis=1), \
            ch(64) + ch(64) + ch(96) + pool

    def block_b(x, cin):
        b3 = conv(x, cin, ch(384), 3, stride=2, pad=0)
        d = conv(conv(conv(x, cin, ch(64), 1), ch(64), ch(96), 3), ch(96), ch(96), 3, stride=2, pad=0)
        return b.node("Concat", [b3, d, max_pool(x)], axis=1), ch(384) + ch(96) + cin

    def block_c(x, cin, c7):
        b7 = conv(conv(conv(x, cin, c7, 1), c7, c7, 1, 7), c7, ch(192), 7, 1)
        d = conv(x, cin, c7, 1)
        for k, (kh, kw) in enumerate(((7, 1), (1, 7), (7, 1), (1, 7))):
            d = conv(d, c7, c7 if k < 3 else ch(192), kh, kw)
        return b.node("Concat", [conv(x, cin, ch(192), 1), b7, d, conv(avg_pool(x), cin, ch(192), 1)], axis=1), \
            4 * ch(192)

    def block_d(x, cin):
        b3 = conv(conv(x, cin, ch(192), 1), ch(192), ch(320), 3, stride=2, pad=0)
        b7 = conv(conv(conv(x, cin, ch(192), 1), ch(192), ch(192), 1, 7), ch(192), ch(192), 7, 1)
        b7 = conv(b7, ch(192), ch(192), 3, stride=2, pad=0)
        return b.node("Concat", [b3, b7, max_pool(x)], axis=1), ch(320) + ch(192) + cin

    def block_e(x, cin):
        def fork(y, c):             # 1x3 and 3x1 side by side
            return [conv(y, c, ch(384), 1, 3), conv(y, c, ch(384), 3, 1)]
        b3 = fork(conv(x, cin, ch(384), 1), ch(384))
        d = fork(conv(conv(x, cin, ch(448), 1), ch(448), ch(384), 3), ch(384))
        parts = [conv(x, cin, ch(320), 1), b.node("Concat", b3, axis=1), b.node("Concat", d, axis=1),
                 conv(avg_pool(x), cin, ch(192), 1)]
        return b.node("Concat", parts, axis=1), ch(320) + 4 * ch(384) + ch(192)

    x = conv("input", 3, ch(32), 3, stride=2, pad=0)
    x = conv(x, ch(32), ch(32), 3, pad=0)
    x = max_pool(conv(x, ch(32), ch(64), 3))
    x = max_pool(conv(conv(x, ch(64), ch(80), 1), ch(80), ch(192), 3, pad=0))
    c = ch(192)
    for pool in (ch(32), ch(64), ch(64)):
        x, c = block_a(x, c, pool)
    x, c = block_b(x, c)
    for c7 in (128, 160, 160, 192)[:blocks_c]:
        x, c = block_c(x, c, ch(c7))
    x, c = block_d(x, c)
    x, c = block_e(x, c)
    x, c = block_e(x, c)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model((batch, 3, size, size), b.gemm(x, c, classes), (batch, classes), name="inception_v3")
