"""Compile once for every batch size and sequence length.

``python -m benchmarks.dynamic [--threads 2] [--pairs 15] [--quick] [--no-compile-times]``

The model zoo's BERT-style transformer encoder (``model_zoo.transformer_encoder``, hidden 256,
4 heads, 4 layers, FFN 1024) with symbolic ``batch`` and ``seq`` axes is compiled once with
``lw.compile(graph, polymorphic=True)``.  Then, for batch in {1, 4} x seq in {1, 7, 64, 128, 200,
384}, its result is checked against onnxruntime (the same model, run with dynamic axes), and three
things are timed interleaved in one run (2 threads each): the polymorphic executable, a static
compile for exactly that shape (the ``DynamicExecutable``'s specialisation of the same graph), and
onnxruntime.  The columns:

- ``poly/static``: median over rounds of static time / polymorphic time (bar: >= ``POLY_STATIC_BAR``)
- ``poly/ort``: median over rounds of onnxruntime time / polymorphic time (bar 1: >= 0.9)

(> 1 means the polymorphic executable is faster.)  Rounds follow ``benchmarks/compare.py``'s
``interleaved`` conventions, extended to three systems: one warm-up call each, the same number of
calls per sample for all three (enough for ~20 ms of the polymorphic executable), a 0.3 s pause
after each system's sample (spinning worker pools), medians of per-round ratios.

Bar 3 (``--no-compile-times`` skips it): the polymorphic compile (``from_onnx`` + ``lw.compile``)
against the cold compile of one static shape (batch 1, seq 128), each in a fresh process with an
empty object cache (as ``benchmarks/network.py``'s ``compile_times``), and ``lw.load`` of the saved
polymorphic executable in a fresh process.  Bar 3: compile <= 2x the static cold compile, load
< 0.5 s.

``--quick`` runs three shapes with 3 rounds each; ``--tiny`` uses a 1-layer, 64-wide encoder (for the
smoke test, not for numbers).

Bar 2: ``--model resnet18`` runs the zoo's ResNet-18 with symbolic batch, height and width
(``model_zoo.symbolic_sizes(model_zoo.resnet18())``) at 1x224x224, 4x224x224 and 1x256x320 (``--shapes
1x224x224 ...``), the same three columns (the same poly/static bar); ``--model mobilenet_v2``
(or squeezenet1_1, efficientnet_lite, convnext, densenet, unet, style_transfer) the same for the other zoo CNNs.

``--model resnet18 --compile-times-only`` (any zoo CNN) prints only its cold compiles: compile-once
(symbolic batch, height and width) against static (the zoo's shape), each in a fresh process with an
empty object cache; bar: compile-once <= 2x static.  Also their CPU seconds (build workers included,
the figure to compare under load) and the compile-once executable's first run at the zoo's shape,
where it builds the conv variants that shape picks.

``--profile`` (a CNN --model) also prints, per shape, each executable's kernel time summed by kind
(``exe.profile(feed, in_order=True)``: the compile-once kernel's name with its variant, the static
kernel's ops): where a compile-once network loses time to the static compile, kernel by kernel.

``--model unet --up linear_sizes`` (or transpose, nearest, linear, linear_corners) picks how the zoo's
U-Net up-samples (``model_zoo.unet``'s ``up``).

``--model gpt2`` runs the zoo's GPT-2 (distilgpt2's sizes) exported with dynamic batch and length
(``model_zoo.gpt2(batch=None, seq=None)``) at batch x length ``--shapes`` (default 1x1 1x7 1x64 4x64
1x128), the same columns.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
from loopweave.nn_ops.testing.onnxruntime_peer import onnxruntime_session

from loopweave.backends.timing import _per_call, calls_per_sample

from .compare import set_threads

BATCHES = (1, 4)
SEQS = (1, 7, 64, 128, 200, 384)
QUICK_SHAPES = ((1, 1), (1, 128), (4, 64))
ZOO = {}                                                   # transformer_encoder's own defaults
TINY = {"hidden": 64, "heads": 2, "layers": 1, "ffn": 128}
STATIC_SHAPE = (1, 128)                                    # the cold static compile of bar 3
#: compiled once, a network runs each shape at this share of a static compile of that shape or better
POLY_STATIC_BAR = 0.95
RESNET_SHAPES = ((1, 224, 224), (4, 224, 224), (1, 256, 320))   # bar 2: batch x height x width
CNNS = ("resnet18", "mobilenet_v2", "squeezenet1_1", "efficientnet_lite", "convnext", "densenet", "unet", "style_transfer")
GPT2_SHAPES = ((1, 1), (1, 7), (1, 64), (4, 64), (1, 128))        # batch x length

_COMPILE_SCRIPT = """
import json, sys, time
import numpy as np
import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
kwargs, mode, path = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
model = model_zoo.transformer_encoder(batch=None, seq=None, **kwargs)
t0 = time.perf_counter()
graph = lw.from_onnx(model)
if mode == "polymorphic":
    exe = lw.compile(graph, polymorphic=True)
else:
    batch, seq = json.loads(mode)
    hidden = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    exe = lw.compile(graph, progress=False, polymorphic=False).specialization({"input": np.zeros((batch, seq, hidden), np.float32)})
t1 = time.perf_counter()
exe.save(path)
print(f"{t1 - t0:.3f}")
"""

_LOAD_SCRIPT = """
import sys, time
import loopweave as lw
t0 = time.perf_counter()
exe = lw.load(sys.argv[1])
print(f"{time.perf_counter() - t0:.3f}")
"""


_START_SCRIPT = """
import loopweave, loopweave.nn_ops.testing.model_zoo, numpy
print(0)
"""

_CNN_COMPILE_SCRIPT = """
import sys, time
import numpy as np
import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
name, mode, first_run = sys.argv[1], sys.argv[2], sys.argv[3] == "run"
model = getattr(model_zoo, name)()
shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
if mode == "polymorphic":
    model = model_zoo.symbolic_sizes(model)
t0 = time.perf_counter()
graph = lw.from_onnx(model)
exe = lw.compile(graph, polymorphic=True) if mode == "polymorphic" else lw.compile(graph, progress=False)
t1 = time.perf_counter()
if first_run:
    exe.run({model.graph.input[0].name: np.zeros(shape, np.float32)})
print(f"{t1 - t0:.3f} {time.perf_counter() - t1:.3f}")
"""


def _subprocess_seconds(script: str, args: Sequence[str], cache_dir: str) -> float:
    return _subprocess_figures(script, args, cache_dir)[0]


def _subprocess_figures(script: str, args: Sequence[str], cache_dir: str) -> List[float]:
    """The numbers on the last line ``script`` prints, run in a fresh process with ``cache_dir``."""
    env = dict(os.environ, LOOPWEAVE_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"timing subprocess failed:\n{out.stderr[-3000:]}")
    return [float(v) for v in out.stdout.strip().splitlines()[-1].split()]


def compile_times(model_kwargs: dict, static_shape=STATIC_SHAPE):
    """(polymorphic compile, static cold compile, load of the polymorphic .lwx) seconds.

    Each compile runs in a fresh process with its own empty object cache; the load runs in a fresh
    process too."""
    kwargs = json.dumps(model_kwargs)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "encoder.lwx")
        poly = _subprocess_seconds(_COMPILE_SCRIPT, [kwargs, "polymorphic", path], os.path.join(tmp, "cache-poly"))
        static = _subprocess_seconds(_COMPILE_SCRIPT, [kwargs, json.dumps(list(static_shape)),
                                                       os.path.join(tmp, "static.lwx")], os.path.join(tmp, "cache-static"))
        load = _subprocess_seconds(_LOAD_SCRIPT, [path], os.path.join(tmp, "cache-poly"))
    return poly, static, load


def cnn_compile_times(name: str):
    """{what: (seconds, CPU seconds)} of zoo CNN ``name``: ``compile`` once with symbolic batch, height
    and width, ``static`` its cold compile at the zoo's shape, and ``first run`` of the compile-once
    executable at that shape (where it builds the conv variants the shape picks).  Each compile in a
    fresh process with its own empty object cache; CPU: the process's and its build workers', less
    the start of the process (the first run's: a second process that compiles and runs, less the
    first), the figure to compare on a loaded machine."""
    with tempfile.TemporaryDirectory() as tmp:
        def process(mode, run, cache):
            return _with_cpu(lambda: _subprocess_figures(_CNN_COMPILE_SCRIPT, [name, mode, run],
                                                         os.path.join(tmp, cache)))
        start = _with_cpu(lambda: _subprocess_figures(_START_SCRIPT, [], os.path.join(tmp, "cache-start")))[-1]
        compile_s, _, compile_cpu = process("polymorphic", "no-run", "cache-poly")
        _, run_s, both_cpu = process("polymorphic", "run", "cache-poly-run")
        static_s, _, static_cpu = process("static", "no-run", "cache-static")
    return {"compile": (compile_s, compile_cpu - start), "static": (static_s, static_cpu - start),
            "first run": (run_s, both_cpu - compile_cpu)}


def _with_cpu(run: Callable[[], List[float]]) -> tuple:
    """``run()``'s figures and the CPU seconds of the child processes it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = run()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (*figures, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def interleaved_rounds(ours: Callable[[], object], peers: Sequence[Callable[[], object]], pairs: int = 15,
                       min_seconds: float = 0.02, pause: float = 0.3) -> Dict[str, object]:
    """``compare.interleaved`` for one system against several peers in the same rounds.

    Each round times ``ours`` then every peer (the same number of calls each, a pause after each);
    returns the median seconds per call of ``ours`` and of each peer, and per peer the median over
    rounds of peer time / our time."""
    ours()
    for peer in peers:
        peer()
    inner = calls_per_sample(ours, min_seconds)
    ours_t: List[float] = []
    peers_t: List[List[float]] = [[] for _ in peers]
    ratios: List[List[float]] = [[] for _ in peers]
    for _ in range(pairs):
        a = _per_call(ours, inner)
        time.sleep(pause)
        ours_t.append(a)
        for i, peer in enumerate(peers):
            b = _per_call(peer, inner)
            time.sleep(pause)
            peers_t[i].append(b)
            ratios[i].append(b / a)
    return {"ours_s": float(np.median(ours_t)),
            "peers_s": [float(np.median(t)) for t in peers_t],
            "ratios": [float(np.median(r)) for r in ratios]}


def _check(ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray], what: str) -> float:
    """Max abs difference, after asserting agreement at 1e-3 relative to the output's scale."""
    worst = 0.0
    for a, b in zip(ours, theirs):
        if a.shape != b.shape:
            raise AssertionError(f"{what}: shape {a.shape}, onnxruntime {b.shape}")
        scale = max(1e-6, float(np.abs(b).max()))
        diff = float(np.abs(a - b).max()) if a.size else 0.0
        if not np.allclose(a, b, rtol=1e-3, atol=1e-3 * scale):
            raise AssertionError(f"{what} and onnxruntime disagree: max abs diff {diff:.3g} at output scale {scale:.3g}")
        worst = max(worst, diff)
    return worst


def _shape_row(poly, static_exes, sess, feed, label: str, width: int, pairs: int, pause: float):
    """Check the polymorphic and the static executable against onnxruntime at ``feed``, time the
    three interleaved, print the row; (static/poly, ort/poly)."""
    static = static_exes.specialization(feed)
    want = sess.run(None, feed)
    diff = _check(poly.run(feed), want, f"polymorphic at {label}")
    _check(static.run(feed), want, f"static at {label}")
    r = interleaved_rounds(lambda: poly.run(feed), [lambda: static.run(feed), lambda: sess.run(None, feed)],
                           pairs=pairs, pause=pause)
    (static_s, ort_s), (vs_static, vs_ort) = r["peers_s"], r["ratios"]
    print(f"{label:>{width}} {r['ours_s'] * 1e3:9.3f} {static_s * 1e3:10.3f} {ort_s * 1e3:9.3f} "
          f"{vs_static:12.2f} {vs_ort:9.2f} {diff:11.2e}", flush=True)
    return vs_static, vs_ort


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=None, help="rounds per shape (default 15; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"shapes {QUICK_SHAPES} only, 3 rounds each")
    parser.add_argument("--shapes", nargs="+", default=None, metavar="BxS",
                        help="batch x seq pairs to run, e.g. 1x1 4x384 (default: batch 1 and 4 x seq 1, 7, 64, 128, 200, 384)")
    parser.add_argument("--tiny", action="store_true", help="a 1-layer, 64-wide encoder (smoke test only)")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds after each timed sample")
    parser.add_argument("--no-compile-times", action="store_true", help="skip bar 3")
    parser.add_argument("--compile-times-only", action="store_true",
                        help="a CNN --model: only its cold compile-once and static compiles (fresh processes, empty "
                             "object caches); bar: compile-once <= 2x static")
    parser.add_argument("--profile", action="store_true",
                        help="a CNN --model: per shape, both executables' kernel time summed by kind")
    parser.add_argument("--up", choices=("transpose", "nearest", "linear", "linear_corners", "linear_sizes"),
                        default=None, help="--model unet: how it up-samples (model_zoo.unet's up=; linear_sizes: "
                                           "Resize to the skip's sizes computed from shapes)")
    parser.add_argument("--model", choices=("encoder", "gpt2") + CNNS, default="encoder",
                        help="resnet18: bar 2 (symbolic batch, height and width); the other CNNs likewise; "
                             "gpt2: dynamic batch and length")
    args = parser.parse_args(argv)
    if args.model in CNNS and args.compile_times_only:
        times = cnn_compile_times(args.model)
        (poly_c, poly_cpu), (static_c, static_cpu), (run_s, run_cpu) = (times[k] for k in ("compile", "static", "first run"))
        print(f"{args.model} cold compiles (fresh processes, empty object caches): compile-once {poly_c:.2f} s, "
              f"static {static_c:.2f} s, ratio {poly_c / static_c:.2f} (<= 2: {'met' if poly_c <= 2 * static_c else 'missed'}); "
              f"CPU (with the build workers, less a process's start): compile-once {poly_cpu:.1f} s, static "
              f"{static_cpu:.1f} s, ratio {poly_cpu / static_cpu:.2f}; the compile-once executable's first run at the "
              f"zoo's shape, which builds the conv variants that shape picks: {run_s:.2f} s, {run_cpu:.1f} CPU-s")
        return None
    if args.model in CNNS:
        return cnn_main(args)
    if args.model == "gpt2":
        return gpt2_main(args)

    if args.shapes:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes]
    elif args.quick:
        shapes = list(QUICK_SHAPES)
    else:
        shapes = [(b, s) for b in BATCHES for s in SEQS]
    pairs = args.pairs if args.pairs is not None else (3 if args.quick else 15)
    kwargs = TINY if args.tiny else ZOO

    set_threads(args.threads)
    model = model_zoo.transformer_encoder(batch=None, seq=None, **kwargs)
    hidden = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    graph = lw.from_onnx(model)
    t0 = time.perf_counter()
    poly = lw.compile(graph, polymorphic=True)
    poly_s = time.perf_counter() - t0
    static_exes = lw.compile(graph, progress=False, polymorphic=False)     # one static compile per shape
    sess = onnxruntime_session(model, args.threads)
    print(f"transformer encoder {kwargs or 'zoo defaults'}, symbolic batch and seq; {args.threads} threads, "
          f"{pairs} rounds per shape; polymorphic compile {poly_s:.1f} s in this process (object cache as found)")
    print("ratios: median over interleaved rounds of static/poly and ort/poly time (> 1: polymorphic faster); "
          f"bar 1: >= {POLY_STATIC_BAR} and >= 0.9")
    print(f"{'batch x seq':>11} {'poly ms':>9} {'static ms':>10} {'ort ms':>9} {'poly/static':>12} {'poly/ort':>9}"
          f" {'max |diff|':>11}", flush=True)
    worst_static, worst_ort = [], []
    for batch, seq in shapes:
        x = np.random.default_rng(batch * 1000 + seq).standard_normal((batch, seq, hidden)).astype(np.float32)
        vs_static, vs_ort = _shape_row(poly, static_exes, sess, {"input": x}, f"{batch} x {seq}", 11, pairs, args.pause)
        worst_static.append(vs_static)
        worst_ort.append(vs_ort)
    print(f"bar 1: worst poly/static {min(worst_static):.2f} (>= {POLY_STATIC_BAR}: "
          f"{'met' if min(worst_static) >= POLY_STATIC_BAR else 'missed'}), "
          f"worst poly/ort {min(worst_ort):.2f} (>= 0.9: {'met' if min(worst_ort) >= 0.9 else 'missed'}); "
          "every result matched onnxruntime", flush=True)

    if not args.no_compile_times:
        poly_c, static_c, load = compile_times(kwargs)
        print(f"bar 3 (fresh processes, empty object caches): polymorphic compile {poly_c:.2f} s, static cold compile "
              f"at {STATIC_SHAPE[0]} x {STATIC_SHAPE[1]} {static_c:.2f} s, ratio {poly_c / static_c:.2f} (<= 2: "
              f"{'met' if poly_c <= 2 * static_c else 'missed'}); lw.load of the polymorphic .lwx {load:.3f} s "
              f"(< 0.5: {'met' if load < 0.5 else 'missed'})", flush=True)


def _compiled_both(args, model, default_shapes):
    """(shapes, rounds, the polymorphic executable, its compile seconds, the per-shape static one,
    an onnxruntime session) for ``model`` under the command line's options."""
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes] if args.shapes else list(default_shapes)
    pairs = args.pairs if args.pairs is not None else (3 if args.quick else 15)
    set_threads(args.threads)
    graph = lw.from_onnx(model)
    t0 = time.perf_counter()
    poly = lw.compile(graph, polymorphic=True)
    poly_s = time.perf_counter() - t0
    return (shapes, pairs, poly, poly_s, lw.compile(graph, progress=False, polymorphic=False),
            onnxruntime_session(model, args.threads))


def cnn_main(args) -> None:
    """Bar 2: ResNet-18 (or MobileNetV2) with symbolic batch, height and width, compiled once."""
    kwargs = {"up": args.up} if args.up and args.model == "unet" else {}
    model = model_zoo.symbolic_sizes(getattr(model_zoo, args.model)(**kwargs))     # N, H, W symbolic
    shapes, pairs, poly, poly_s, static_exes, sess = _compiled_both(args, model, RESNET_SHAPES)
    print(f"{args.model}{f' (up={args.up})' if kwargs else ''}, symbolic batch, height and width; {args.threads} threads, {pairs} rounds per shape; "
          f"polymorphic compile {poly_s:.1f} s in this process (object cache as found)")
    print("ratios: median over interleaved rounds of static/poly and ort/poly time (> 1: polymorphic faster); "
          f"bar 2: poly/static >= {POLY_STATIC_BAR}")
    print(f"{'N x H x W':>13} {'poly ms':>9} {'static ms':>10} {'ort ms':>9} {'poly/static':>12} {'poly/ort':>9}"
          f" {'max |diff|':>11}", flush=True)
    worst = []
    for batch, h, w in shapes:
        x = np.random.default_rng(batch * 1000 + h + w).standard_normal((batch, 3, h, w)).astype(np.float32)
        worst.append(_shape_row(poly, static_exes, sess, {"input": x}, f"{batch} x {h} x {w}", 13, pairs,
                                args.pause)[0])
        if args.profile:
            _print_profile(poly, static_exes.specialization({"input": x}), {"input": x})
    print(f"bar 2: worst poly/static {min(worst):.2f} (>= {POLY_STATIC_BAR}: "
          f"{'met' if min(worst) >= POLY_STATIC_BAR else 'missed'}); "
          "every result matched onnxruntime", flush=True)


def profile_by_kind(poly, static, feed, repeat: int = 7):
    """({kind: seconds} of the compile-once executable ``poly``, the same of ``static``) at ``feed``:
    the medians of ``exe.profile(feed, repeat, in_order=True)`` summed by the kernel's name (the
    compile-once module's, which names its variant; the static kernel's, which names its ops)."""
    binding = poly.bind(feed)
    sums = ({}, {})
    for (_, seconds), call in zip(poly.profile(feed, repeat=repeat, in_order=True), poly.calls):
        kind = call.module_at(binding).name
        sums[0][kind] = sums[0].get(kind, 0.0) + seconds
    for kind, seconds in static.profile(feed, repeat=repeat, in_order=True):
        sums[1][kind] = sums[1].get(kind, 0.0) + seconds
    return sums


def _print_profile(poly, static, feed) -> None:
    ours, theirs = profile_by_kind(poly, static, feed)
    print(f"  profile (one pass in run order, medians of 7): compile-once {sum(ours.values()) * 1e3:.3f} ms, "
          f"static {sum(theirs.values()) * 1e3:.3f} ms")
    for name, sums in (("compile-once", ours), ("static", theirs)):
        for kind, seconds in sorted(sums.items(), key=lambda kv: -kv[1]):
            print(f"  {name:>12} {kind:<44} {seconds * 1e6:9.1f} us", flush=True)


def gpt2_main(args) -> None:
    """GPT-2 with a dynamic batch and length, compiled once, against static compiles and onnxruntime."""
    shapes, pairs, poly, poly_s, static_exes, sess = _compiled_both(args, model_zoo.gpt2(batch=None, seq=None),
                                                                    GPT2_SHAPES)
    print(f"gpt2, dynamic batch and length; {args.threads} threads, {pairs} rounds per shape; polymorphic "
          f"compile {poly_s:.1f} s in this process (object cache as found)")
    print("ratios: median over interleaved rounds of static/poly and ort/poly time (> 1: polymorphic faster)")
    print(f"{'batch x seq':>11} {'poly ms':>9} {'static ms':>10} {'ort ms':>9} {'poly/static':>12} {'poly/ort':>9}"
          f" {'max |diff|':>11}", flush=True)
    for batch, seq in shapes:
        ids = np.random.default_rng(batch * 1000 + seq).integers(0, 50257, (batch, seq)).astype(np.int64)
        _shape_row(poly, static_exes, sess, {"input": ids}, f"{batch} x {seq}", 11, pairs, args.pause)


if __name__ == "__main__":
    main()
