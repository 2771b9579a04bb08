"""The ``loopweave`` command line: ``demo``, and for ONNX networks ``tune``, ``compile``, ``run``, ``bench``."""
from __future__ import annotations

import argparse
import sys


class UsageError(Exception):
    """A bad command line or input file: printed as one line, exit code 2."""


def _input_shapes(specs):
    """``name=1x3x224x224`` options to a dict of shapes."""
    shapes = {}
    for spec in specs or []:
        name, _, dims = spec.partition("=")
        if not dims:
            raise UsageError(f"--input-shape takes name=AxBxC, got {spec!r}")
        try:
            shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise UsageError(f"--input-shape takes name=AxBxC with whole numbers, got {spec!r}") from None
    return shapes


# the names of nn_ops.testing.model_zoo.NAMES (kept here so that the CLI starts without importing it)
ZOO_MODELS = ("resnet18", "mobilenet_v2", "small_cnn", "transformer_encoder", "squeezenet1_1", "vit_tiny",
              "efficientnet_lite", "convnext", "densenet", "unet", "gpt2", "mlp_mixer", "style_transfer",
              "lstm_lm", "shufflenet_v2", "inception_v3", "resnet50")


def _model_source(path: str):
    """A path to an .onnx file, or ``zoo:NAME`` for a model built in memory (``ZOO_MODELS``)."""
    if path.startswith("zoo:"):
        from .nn_ops.testing import model_zoo
        name = path[4:]
        if name not in ZOO_MODELS:
            raise UsageError(f"unknown zoo model {name!r} ({', '.join(ZOO_MODELS)})")
        return getattr(model_zoo, name)()
    return path


def _duration(text: str) -> float:
    """``90``, ``90s``, ``20m`` or ``1.5h`` to seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        raise UsageError(f"--time-budget takes seconds or a duration like 90s, 20m, 1h; got {text!r}") from None
    if seconds <= 0:
        raise UsageError(f"--time-budget must be positive, got {text!r}")
    return seconds


def _cmd_tune(args) -> int:
    from . import autoschedule as auto, from_onnx
    graph = from_onnx(_model_source(args.model), input_shapes=_input_shapes(args.input_shape))
    budget = _duration(args.time_budget) if args.time_budget else None
    if args.trials is None and budget is None:
        raise UsageError("give --trials N, --time-budget DURATION, or both")
    result = auto.tune_network(graph, target=args.target, trials=args.trials, time_budget=budget, log=args.log,
                               progress=not args.quiet)
    print(result)
    print(f"wrote {args.log}; compile with: loopweave compile {args.model} -o model.lwx --tuning-log {args.log}")
    return 0


def _cmd_compile(args) -> int:
    import time
    from . import compile as lw_compile, from_onnx
    t0 = time.perf_counter()
    graph = from_onnx(_model_source(args.model), input_shapes=_input_shapes(args.input_shape))
    t1 = time.perf_counter()
    if not args.output and not args.export:
        raise UsageError("give -o model.lwx, --export model.so, or both")
    exe = lw_compile(graph, target=args.target, progress=not args.quiet, tuning_log=args.tuning_log)
    t2 = time.perf_counter()
    wrote = []
    if args.output:
        exe.save(args.output)
        wrote.append(args.output)
    if args.export:
        lib = exe.export_library(args.export, prefix=args.prefix, params=args.params, cc=args.cc)
        wrote += [str(lib), str(lib.with_suffix(".h"))] + ([str(lib.with_suffix(".c"))] if lib.suffix == ".o" else []) \
            + ([str(lib.with_suffix(".params"))] if args.params == "side" else [])
    print(f"{exe}\nimport {t1 - t0:.2f} s, compile {t2 - t1:.2f} s; wrote {', '.join(wrote)}")
    return 0


def _load_array(name: str, path: str):
    """An input array from a .npy file, or a one-line error naming the input and the file."""
    import numpy as np
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"input {name!r}: no such file {path!r}") from None
    except (OSError, ValueError) as exc:   # unreadable, not .npy, or a pickled object array
        raise UsageError(f"input {name!r}: cannot read {path!r} as a .npy array ({exc})") from None


def _cmd_run(args) -> int:
    import numpy as np
    from . import load
    exe = load(args.model)
    feed = {}
    for spec in args.input or []:
        name, _, path = spec.partition("=")
        if not path:
            raise UsageError(f"--input takes name=file.npy, got {spec!r}")
        feed[name] = _load_array(name, path)
    if not feed and args.random:
        from .nn_ops.testing.onnxruntime_peer import random_feed
        feed = random_feed(exe)
    outputs = exe.run(feed)
    for (name, _, _), out in zip(exe.outputs, outputs):
        if args.output_dir:
            import os
            os.makedirs(args.output_dir, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
            path = os.path.join(args.output_dir, safe + ".npy")
            np.save(path, out)
            print(f"{name}: {out.dtype}{list(out.shape)} -> {path}")
        else:
            flat = out.reshape(-1)
            print(f"{name}: {out.dtype}{list(out.shape)} min {flat.min():.4g} max {flat.max():.4g} "
                  f"first {np.array2string(flat[:6], precision=4)}")
            if out.ndim == 2 and out.shape[1] > 1:
                print(f"  argmax per row: {out.argmax(axis=1).tolist()[:16]}")
    return 0


def _cmd_bench(args) -> int:
    import time
    import onnx
    from . import compile as lw_compile, from_onnx
    from .nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime
    source = _model_source(args.model)
    model = source if isinstance(source, onnx.ModelProto) else onnx.load(source)
    t0 = time.perf_counter()
    exe = lw_compile(from_onnx(model, input_shapes=_input_shapes(args.input_shape)), progress=not args.quiet)
    compile_s = time.perf_counter() - t0
    c = compare_with_onnxruntime(model, exe, threads=args.threads, pairs=args.pairs)
    print(f"{args.model}: loopweave {c.ours_s * 1e3:.2f} ms, onnxruntime {c.theirs_s * 1e3:.2f} ms, "
          f"speed-up {c.ratio:.2f}x (median of {args.pairs} interleaved pairs, {args.threads} threads; "
          f"> 1 means loopweave is faster); compile {compile_s:.1f} s")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="loopweave", description="loopweave tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile bundled kernels, check them against numpy, print timings")
    demo.add_argument("--size", type=int, default=1024, help="matmul size N (default 1024)")
    demo.add_argument("--quick", action="store_true", help="small sizes, for a fast smoke test")

    comp = sub.add_parser("compile", help="compile an ONNX model into an executable file (.lwx) or a C library (.so)")
    comp.add_argument("model", help="model.onnx (or zoo:NAME: resnet18, squeezenet1_1, vit_tiny, gpt2, ... see ZOO_MODELS)")
    comp.add_argument("-o", "--output", help="where to write the executable (e.g. model.lwx)")
    comp.add_argument("--export", metavar="MODEL.so",
                      help="also (or instead) write a shared library with a C API and its header MODEL.h beside it")
    comp.add_argument("--prefix", default="lw_", help="prefix of the library's exported C symbols (default lw_)")
    comp.add_argument("--params", choices=("embed", "side"), default="embed",
                      help="with --export: weights inside the library (embed, default) or in MODEL.params beside it")
    comp.add_argument("--target", default="llvm",
                      help="the CPU to compile for: llvm (this machine, default), or e.g. 'llvm -mtriple=aarch64-linux-gnu "
                           "-mcpu=neoverse-n1', 'llvm -mcpu=x86-64-v2' (then --export MODEL.o, or MODEL.so with --cc)")
    comp.add_argument("--cc", metavar="COMPILER",
                      help="with --export MODEL.so: the C compiler that links it (default $CC or cc; a cross "
                           "compiler such as aarch64-linux-gnu-gcc for another CPU)")
    comp.add_argument("--input-shape", action="append", metavar="NAME=AxBxC",
                      help="fix a dynamic input's shape (static shapes only)")
    comp.add_argument("--tuning-log", metavar="LOG.jsonl",
                      help="apply the best tuning records of this log (from 'loopweave tune'); other kernels keep "
                           "their default schedules")
    comp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    tune = sub.add_parser("tune", help="search schedules for every kernel of an ONNX model; records go to a log")
    tune.add_argument("model", help="model.onnx (or zoo:resnet18, zoo:mobilenet_v2, zoo:transformer_encoder, ...)")
    tune.add_argument("--log", required=True, metavar="LOG.jsonl",
                      help="the tuning log (JSON lines): appended to, and read back to resume")
    tune.add_argument("--trials", type=int, help="measured candidates in all (across the network's kernels)")
    tune.add_argument("--time-budget", metavar="DURATION", help="wall time for the whole search: 90s, 20m, 1h")
    tune.add_argument("--target", default="llvm")
    tune.add_argument("--input-shape", action="append", metavar="NAME=AxBxC")
    tune.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    run = sub.add_parser("run", help="run a compiled executable on inputs from .npy files")
    run.add_argument("model", help="an executable written by 'loopweave compile'")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input array (repeat per input)")
    run.add_argument("--random", action="store_true", help="feed random inputs (when no --input is given)")
    run.add_argument("--output-dir", help="save each output as <name>.npy there instead of printing a summary")

    bench = sub.add_parser("bench", help="latency of loopweave vs onnxruntime on an ONNX model, interleaved")
    bench.add_argument("model", help="model.onnx (or zoo:NAME: resnet18, squeezenet1_1, vit_tiny, gpt2, ... see ZOO_MODELS)")
    bench.add_argument("--threads", type=int, default=2)
    bench.add_argument("--pairs", type=int, default=15)
    bench.add_argument("--input-shape", action="append", metavar="NAME=AxBxC")
    bench.add_argument("-q", "--quiet", action="store_true")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(size=256 if args.quick else args.size)
    from .errors import LoopweaveError
    handlers = {"compile": _cmd_compile, "run": _cmd_run, "bench": _cmd_bench, "tune": _cmd_tune}
    try:
        return handlers[args.command](args)
    except (LoopweaveError, UsageError) as exc:
        print(f"loopweave {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:     # a model file that is missing, an output folder that cannot be written, ...
        where = f" {exc.filename!r}" if exc.filename else ""
        print(f"loopweave {args.command}: error:{where} {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
