"""patches (im2col of an NHWC image) against numpy, with each of its schedule's channel paths."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import ExprError
from loopweave.nn_ops.ops.patches import patches


def _reference(x, kernel, stride, padding, dilation, fill):
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = kernel, stride, dilation, padding
    xp = np.full((n, h + pt + pb, w + pl + pr, c), fill, x.dtype)
    xp[:, pt:pt + h, pl:pl + w] = x
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = np.empty((n, oh, ow, kh, kw, c), x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            out[:, :, :, ky, kx] = xp[:, ky * dh:ky * dh + (oh - 1) * sh + 1:sh, kx * dw:kx * dw + (ow - 1) * sw + 1:sw]
    return out


@pytest.mark.parametrize("channels", [3, 12, 64, 70])     # unrolled, one short vector, whole vectors, shifted tail
@pytest.mark.parametrize("geometry", [((3, 3), (1, 1), (1, 1, 1, 1), (1, 1)), ((7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),
                                      ((3, 2), (2, 1), (0, 1, 2, 0), (2, 1)), ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1))])
@pytest.mark.parametrize("pad_input", [False, True])
def test_patches_match_numpy(channels, geometry, pad_input):
    kernel, stride, padding, dilation = geometry
    x = np.random.default_rng(channels).integers(0, 256, (2, 9, 11, channels)).astype(np.uint8)
    X = lw.placeholder(x.shape, name="X", dtype="uint8")
    fill = np.array([37], np.uint8)
    Z = lw.placeholder((1,), name="Z", dtype="uint8") if pad_input else None
    P = patches(X, kernel, stride, padding, dilation, Z)
    f = lw.build(nn_ops.schedule(P, "llvm"), [X] + ([Z] if pad_input else []) + [P])
    want = _reference(x, kernel, stride, padding, dilation, fill[0] if pad_input else 0)
    out = np.zeros(want.shape, np.uint8)
    f(*([x, fill] if pad_input else [x]), out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("channels,filled", [(3, 4), (5, 8), (64, 68)])
def test_patches_fill_each_taps_channels_with_the_pad_value(channels, filled):
    x = np.random.default_rng(channels).integers(0, 256, (1, 6, 7, channels)).astype(np.uint8)
    X, Z = lw.placeholder(x.shape, name="X", dtype="uint8"), lw.placeholder((1,), name="Z", dtype="uint8")
    P = patches(X, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), Z, channels=filled)
    f = lw.build(nn_ops.schedule(P, "llvm"), [X, Z, P])
    fill = np.array([9], np.uint8)
    wide = np.concatenate([x, np.full(x.shape[:3] + (filled - channels,), 9, np.uint8)], axis=3)
    want = _reference(wide, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 9)
    out = np.zeros(want.shape, np.uint8)
    f(x, fill, out)
    np.testing.assert_array_equal(out, want)


def test_patches_name_what_is_wrong():
    X = lw.placeholder((1, 4, 4, 2), name="X", dtype="uint8")
    with pytest.raises(ExprError, match="must be 4-d"):
        patches(lw.placeholder((4, 4, 2), name="Y", dtype="uint8"), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ExprError, match="does not fit"):
        patches(X, (5, 5), (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ExprError, match="1 channels per tap cannot hold the image's 2"):
        patches(X, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), channels=1)
    with pytest.raises(ExprError, match="one uint8 value"):
        patches(X, (1, 1), (1, 1), (1, 1, 1, 1), (1, 1), lw.placeholder((2,), name="Z", dtype="uint8"))
