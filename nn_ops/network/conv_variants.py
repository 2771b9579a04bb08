"""The kernel variants of a conv on maps of symbolic size, for both network compilers over
symbolic sizes (the Graph pipeline's ``symbolic_compile.py`` and the compile-once walk): a call holds
several kernels of the same arguments and runs the first whose size condition holds at a binding.
Winograd kernels in register blocks of ``WINOGRAD_TILE_BLOCKS`` tiles, direct ones in row blocks of
``DIVIDING_ROW_BLOCKS`` pixels, each built over whole blocks where its condition says they are."""
from __future__ import annotations

import math
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from . import symbolic as S
from ..ops.nchwc import SYMBOLIC_ROW_BLOCK, row_block_fits, symbolic_row_block
from ..ops.winograd import MIN_WINOGRAD_PIXELS, winograd_largest_map


class KernelVariant(NamedTuple):
    """A second kernel of a call (``_Builder.kernel``'s ``variants``): built by ``make`` with the same
    arguments, run at bindings where the sympy ``size`` is at most ``at_most``; ``key`` tells it apart
    in the kernel table, ``what`` names its module; ``multiples`` {sympy size of an input: (k, r)}
    builds it over that size as ``k`` times a size var of its own, plus ``r`` (where the condition says
    ``k`` divides the size less ``r``: an unpadded conv's input, two more than its whole tiles);
    ``units``: sympy sizes that are the constant 1 in this kernel (where the condition says so);
    ``deferred``: built at the first binding that runs it, not with the network (``Deferred``: the
    compile-once walk without a tuning log; the Graph pipeline builds every variant up front)."""
    size: object
    at_most: int
    make: Callable
    key: str
    what: str
    multiples: Optional[Dict[object, Tuple[int, int]]] = None
    units: Tuple = ()
    deferred: bool = False


def multiple_name(index: int, k: int, r: int = 0) -> str:
    """The size var of a variant that takes size var ``index`` as ``k`` times a whole number plus ``r``
    (``v2x14``: ``v2 / 14``; ``v2x14p2``: ``(v2 - 2) / 14``)."""
    return f"v{index}x{k}" + (f"p{r}" if r else "")


#: a conv on rows of symbolic width also gets kernels with register blocks of these many pixels, the
#: first that divides the row run at a binding (the general kernel's blocks of 8 leave a tail: with
#: its accumulators in memory ResNet-18's 7x7 layers ran 2.6x slower than the static compile; padded
#: in registers, the network still ran 0.90-0.98x without these; 7
#: divides its rows at 224, 5 those at 320: 160 ... 10)
DIVIDING_ROW_BLOCKS = (7, 5)
#: register blocks (in 2x2 tiles) of the Winograd kernels of a conv on maps of symbolic size, the
#: last taken wherever no other divides a row's tiles (a tail then): rows of 16 pixels (a U-Net's
#: 256 ... 16 at 256, where blocks of 7 leave a tail: 1.10x its time at 1x256x256), 14 (ResNet-18's
#: 56/28/14 at 224) and any other. A block of 5 (ResNet-18's maps at 320) ran no faster than 7's
#: tail (1.00x at 1x256x320) and cost 8 kernels, an eighth of its cold compile (19.4 -> 17.2 s).
#: Re-measure: `python -m benchmarks.dynamic --model resnet18 --shapes 1x256x320` and `--model unet`.
WINOGRAD_TILE_BLOCKS = (8, 7)


def winograd_variants(target, in_shape, out_shape, pad: int, make) -> list:
    """The Winograd kernels of a 3x3 stride-1 conv padded by ``pad`` (1, or 0 after an explicit
    reflection pad) on every side (``winograd_rows.py``), one per register block
    of ``WINOGRAD_TILE_BLOCKS`` tiles, where the map is one where Winograd pays
    (``winograd_pays``'s sizes). Blocks of 8 where the map is even and they divide a row's
    tiles and 7 does not, built over the input as 2 x a size var by 2 x ``tb`` x another (plus
    2 unpadded: whole tiles and blocks by construction: less code, a third less compile time
    than plain size vars); else blocks of 7, odd maps too, on rows of at least 7 tiles, the
    row's last block overlapping the one before."""
    h, w, oh, ow = in_shape[2], in_shape[3], out_shape[2], out_shape[3]
    fits = (S.positive_part(MIN_WINOGRAD_PIXELS - oh * ow)
            + S.positive_part(oh * ow - winograd_largest_map(target)))
    tiles = S.ceildiv(ow, 2, evaluate=False)        # a row's 2x2 tiles (only evaluated at bindings)
    *whole, last = WINOGRAD_TILE_BLOCKS
    variants = []
    for tb in whole:
        steps = {}
        for d, k in ((h, 2), (w, 2 * tb)):
            if not S.is_static(d):
                steps[d] = math.lcm(steps.get(d, 1), k)     # one symbol for both: a square map
        multiples = {d: (k, 2 - 2 * pad) for d, k in steps.items()}
        condition = fits + S.remainder(oh, 2) + S.remainder(ow, 2 * tb) + S.divisible_not_by(tiles, tb, last)
        variants.append(KernelVariant(condition, 0, lambda *hs, extent, tb=tb: make(*hs, extent=extent, tile_block=tb,
                                                                                    whole_blocks=True),
                                      f"winograd tiles={tb}", f"winograd_{tb}", multiples, deferred=True))
    # over its input as size vars plus a constant: unpadded, a height of a size var + 2 (the
    # kernel then knows that input holds a 3x3 window: over a plain var its every extent was a
    # select on that, its vectors run-time loops, 2.6 ms against 1.2 static at 50 x 78); a
    # width of a size var + that of a row of ``last`` tiles (each size var is at least 1), so
    # the row's last block moves inwards, overlapping the one before, and every block is whole
    # (no tail code: a third less compile time). Narrower rows run the other kernels.
    wide = 2 * last - 2 * pad + 1
    at_least = {d: (1, r) for d, r in ((h, 2 - 2 * pad), (w, wide)) if not S.is_static(d) and r}
    if not S.is_static(w) or int(w) > wide:
        variants.append(KernelVariant(fits + S.positive_part(wide + 1 - w), 0,
                                      lambda *hs, extent: make(*hs, extent=extent, tile_block=last),
                                      f"winograd tiles={last}, any size", f"winograd_{last}", at_least,
                                      deferred=True))
    return variants



def is_projection(weight_shape, stride) -> bool:
    """Whether a conv is a 1x1 strided one (a residual block's projection shortcut), which gets no
    row-block variants: next to the 3x3 strided conv on the same input it does a ninth of the work,
    so the general kernel's padded last block costs little; its variants were 6 of ResNet-18's 64
    kernels.  ResNet-18's three projections without them, one thread, in run order (profile medians,
    under load): 187 -> 199 us at 1x224x224, 323 -> 356 us at 1x256x320 (0.1 % of the network)."""
    return tuple(weight_shape[2:]) == (1, 1) and stride != (1, 1)


def row_block_variants(width, make, weight_shape, blocked_input: bool, in_width=None) -> list:
    """Kernels with register blocks of ``DIVIDING_ROW_BLOCKS`` pixels, each taken where it divides
    the output row (``width``, a sympy size) and the general block does not: no tail there (7
    divides ResNet's rows of 28 ... 7 at 224, 5 those of 20 and 10 at 320).  ``weight_shape``: a
    dense conv's packed weight (its blocks must fit the registers), None for a depthwise one.
    ``in_width``: the input's width where the output row is as wide (stride 1, "same" padding): the
    kernels are then built over that width as ``pixels`` x a size var, so they hold no code for a
    row's partial last block, which they never run (a quarter to a third less compile time)."""
    if S.is_static(width):
        return []
    if in_width is not None and (S.is_static(in_width) or S.equal(in_width, width) is not True):
        in_width = None
    if weight_shape is None:        # depthwise: one channel vector a block, any row block fits
        general, fits = SYMBOLIC_ROW_BLOCK, (lambda pixels: True)
    else:
        general = symbolic_row_block(weight_shape, blocked_input)
        fits = (lambda pixels: row_block_fits(weight_shape, blocked_input, pixels))
    return [KernelVariant(S.divisible_not_by(width, pixels, general), 0,
                          lambda *h, extent, pixels=pixels: make(*h, extent=extent, row_block=pixels,
                                                                 whole_blocks=True),
                          f"row_block={pixels}", f"rows_of_{pixels}", None if in_width is None else {in_width: (pixels, 0)},
                          deferred=True)
            for pixels in DIVIDING_ROW_BLOCKS if fits(pixels)]
