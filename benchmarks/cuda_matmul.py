"""Matmul on the GPU: loopweave's default CUDA schedule vs torch.matmul (cuBLAS, TF32 off).

``python -m benchmarks.cuda_matmul [--sizes 4096] [--pairs 15] [--precision tf32|fp16]`` checks the result
against torch, then times both alternately on the same device arrays (both calls
synchronise, so each sample is one whole kernel) and prints GFLOPS and the ratio
(median of per-pair torch-time / loopweave-time; > 1 means loopweave is faster).
Exits with a message when there is no GPU or no PyTorch.  ``--precision tf32``: loopweave's
tensor-core schedule against cuBLAS with TF32 on (the same rounding on both sides); ``fp16``: against
torch.matmul under ``torch.autocast`` to float16 (float32 in, float16 products; its output float16).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import loopweave as lw
from loopweave import nn_ops

from .compare import interleaved


def build(m: int, n: int, k: int, tiles=None, k_tile=None, a_panel=None, threads=None, precision="fp32",
          asynchronous=None):
    """The default CUDA schedule (for ``precision``; its panels filled by cp.async with ``asynchronous``
    True, through registers with False, as ``ASYNC_COPIES`` says with None), or with ``tiles`` =
    (rows, columns) per thread, the reduction step ``k_tile`` forced, or A's shared panel laid out as
    ``a_panel`` (``matmul.A_PANELS``)."""
    A = lw.placeholder((m, k), name="A")
    B = lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    if tiles is None and k_tile is None and a_panel is None and threads is None:
        from loopweave.nn_ops.compile import with_precision
        from loopweave.nn_ops.ops.cuda import matmul as simt, matmul_tensor_cores as tensor_cores
        target = with_precision(lw.target.resolve_target("cuda"), precision)
        saved = simt.ASYNC_COPIES, tensor_cores.ASYNC_COPIES
        if asynchronous is not None:
            simt.ASYNC_COPIES = tensor_cores.ASYNC_COPIES = asynchronous
        try:
            return lw.build(nn_ops.schedule(C, target), [A, B, C], target=target)
        finally:
            simt.ASYNC_COPIES, tensor_cores.ASYNC_COPIES = saved
    from loopweave.nn_ops.ops.cuda.matmul import THREADS, _schedule_gemm_cuda
    s = lw.create_schedule(C)
    _schedule_gemm_cuda(s, C.op, lw.target.resolve_target("cuda"), batch=False, tiles=tiles, k_tile=k_tile,
                        a_panel=a_panel, threads=threads or (THREADS, THREADS))
    return lw.build(s, [A, B, C], target="cuda")


PANEL_SUFFIXES = {"r": "rows", "s": "steps", "p": "padded_steps"}


def parse_variant(spec: str):
    """``"8x4"``, ``"8x4k32"``, ``"8x4k32s"`` or ``"8x4k16s@32x8"``: rows x columns per thread,
    optionally the reduction step, a letter for A's shared panel (``PANEL_SUFFIXES``; none: the
    default) and rows x columns of threads per block (none: 16 x 16)."""
    spec, _, block = spec.partition("@")
    threads = tuple(int(v) for v in block.split("x")) if block else None
    panel = PANEL_SUFFIXES.get(spec[-1])
    tiles, _, k_tile = spec.rstrip("".join(PANEL_SUFFIXES)).partition("k")
    rows, cols = (int(v) for v in tiles.split("x"))
    return (rows, cols), (int(k_tile) if k_tile else None), panel, threads


def _alternated(fns: dict, pairs: int, seconds: float = 0.02) -> dict:
    """Median seconds per call of each function, sampled in turns whose order flips every round
    (a GPU whose clocks still ramp up favours whatever runs second in a fixed order)."""
    import time
    for fn in fns.values():
        fn()
    first = next(iter(fns.values()))
    t0 = time.perf_counter()
    first()
    inner = max(1, int(seconds / max(time.perf_counter() - t0, 1e-7)))
    samples = {k: [] for k in fns}
    for r in range(pairs):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t0 = time.perf_counter()
            for _ in range(inner):
                fns[k]()
            samples[k].append((time.perf_counter() - t0) / inner)
    return {k: float(np.median(v)) for k, v in samples.items()}


def host_path(f, a, b, c, pairs: int) -> str:
    """Seconds per synchronised call with device arrays and with torch tensors, with and without the
    replay of marshalled launches, against the kernel alone: the host's share."""
    from loopweave.backends.cuda.ndarray import as_device_array
    views = [as_device_array(t) for t in (a, b, c)]

    def general(*args):
        replayable, f._replayable = f._replayable, False
        try:
            f(*args)
        finally:
            f._replayable = replayable
    kernel = f.time(*views)
    t = _alternated({"device arrays, general": lambda: general(*views), "device arrays, replayed": lambda: f(*views),
                     "torch tensors, general": lambda: general(a, b, c), "torch tensors, replayed": lambda: f(a, b, c)},
                    pairs)
    return f"  kernel alone {kernel * 1e6:.1f} us\n" + "\n".join(f"  {k:<26} {v * 1e6:8.1f} us" for k, v in t.items())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--tiles", nargs="*", default=[], metavar="RxC[kK]",
                        help="also time these register blocks per thread and reduction steps (e.g. 8x8 "
                             "4x8 8x4k32; a trailing r, s or p: A's shared panel by rows, steps or padded "
                             "steps; @TYxTX: threads per block), kernel alone")
    parser.add_argument("--host", action="store_true",
                        help="also time the host path of a call: device arrays and torch tensors, "
                             "launches replayed or marshalled per call")
    parser.add_argument("--precision", choices=["fp32", "tf32", "fp16"], default="fp32",
                        help="tf32: our tensor-core schedule against cuBLAS with TF32 on; fp16: against "
                             "torch.autocast(float16)")
    parser.add_argument("--register-copies", action="store_true",
                        help="also time the default schedule with its panels double-buffered through registers "
                             "instead of cp.async (the default where the panels copy inputs as they are), kernel alone")
    args = parser.parse_args(argv)
    from loopweave.backends.cuda.driver import get_driver
    try:
        drv = get_driver()
    except lw.BuildError as exc:
        print(f"cuda_matmul: {exc}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("cuda_matmul: PyTorch is needed as the reference (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("cuda_matmul: torch sees no CUDA device", file=sys.stderr)
        return 2
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32      # compare like with like
    torch.backends.cudnn.allow_tf32 = tf32
    rtol = 1e-3 if args.precision == "fp32" else 1e-2
    autocast = torch.autocast("cuda", dtype=torch.float16, enabled=args.precision == "fp16")
    print(f"device: {drv.name()} ({drv.arch}), {args.precision}")
    print(f"{'shape (M x N x K)':<34} {'ours GF':>9} {'torch GF':>9} {'ratio':>7}")
    for size in args.sizes:
        f = build(size, size, size, precision=args.precision)
        a = torch.rand(size, size, device="cuda")
        b = torch.rand(size, size, device="cuda")
        c = torch.empty(size, size, device="cuda")
        ref = torch.empty_like(c)
        f(a, b, c)
        with autocast:
            ref.copy_(torch.matmul(a, b))
        np.testing.assert_allclose(c.cpu().numpy(), ref.cpu().numpy(), rtol=rtol, atol=1e-2)

        def theirs():
            with autocast:
                torch.matmul(a, b)
            torch.cuda.synchronize()
        cmp = interleaved(lambda: f(a, b, c), theirs, pairs=args.pairs, pause=0.05)
        print(cmp.row(f"{size} x {size} x {size}", 2.0 * size ** 3))
        print(f"{'':<34} loopweave kernel alone (CUDA events): {2.0 * size ** 3 / f.time(a, b, c) / 1e9:.1f} GF")
        if args.host:
            print(host_path(f, a, b, c, args.pairs))
        if args.register_copies:
            g = build(size, size, size, precision=args.precision, asynchronous=False)
            g(a, b, c)
            np.testing.assert_allclose(c.cpu().numpy(), ref.cpu().numpy(), rtol=rtol, atol=1e-2)
            print(f"{'':<34} panels through registers, kernel alone: {2.0 * size ** 3 / g.time(a, b, c) / 1e9:.1f} GF")
        for spec in args.tiles:
            g = build(size, size, size, *parse_variant(spec))
            g(a, b, c)
            np.testing.assert_allclose(c.cpu().numpy(), ref.cpu().numpy(), rtol=1e-3, atol=1e-2)
            print(f"{'':<34} {spec} per thread, kernel alone: {2.0 * size ** 3 / g.time(a, b, c) / 1e9:.1f} GF")
    return 0


if __name__ == "__main__":
    sys.exit(main())
