"""The ``loopweave`` command line: ``demo``, ``zoo`` (the bundled models), and for ONNX networks ``tune``,
``compile``, ``run``, ``bench``.  Models load through ``nn_ops/models.py`` (a path or ``zoo:NAME``), so
every subcommand words a missing or malformed model alike."""
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


def _sizes(specs) -> dict:
    """``seq=128`` options to a dict of symbol sizes."""
    sizes = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        if not name or not value.isdigit():
            raise UsageError(f"--size takes SYMBOL=N with a whole number N, got {spec!r}")
        sizes[name] = int(value)
    return sizes


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
    from . import autoschedule as auto, extract_tasks, from_onnx
    from .extras import require_extra
    budget = _duration(args.time_budget) if args.time_budget else None
    if args.trials is None and budget is None:
        raise UsageError("give --trials N, --time-budget DURATION, or both")
    require_extra("lightgbm", "loopweave tune (the autoscheduler's cost model)")
    graph = from_onnx(args.model, input_shapes=_input_shapes(args.input_shape))
    tasks = extract_tasks(graph, args.target, sizes=_sizes(args.size) if args.size else None)
    client = _dask_client(args.scheduler) if args.scheduler else None
    try:
        result = auto.tune_network(tasks, trials=args.trials, time_budget=budget,
                                   log=args.log, progress=not args.quiet, executor=client)
    finally:
        if client is not None:
            client.close()
    print(result)
    print(f"wrote {args.log}; compile with: loopweave compile {args.model} -o model.lwx --tuning-log {args.log}")
    return 0


#: how long ``loopweave tune --scheduler`` waits for the scheduler to answer
SCHEDULER_TIMEOUT_S = 10


def _dask_client(address: str):
    """A Dask client connected to the scheduler at ``address`` (its workers build and time the
    candidates), or a UsageError saying that none answers there."""
    from .extras import require_extra
    distributed = require_extra("distributed", "loopweave tune --scheduler (measuring on a Dask cluster)")
    try:
        return distributed.Client(address, timeout=f"{SCHEDULER_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--scheduler {address}: no Dask scheduler answers there ({exc}); start one with "
                         f"'dask scheduler' and workers with 'dask worker {address}' on the machines to measure "
                         f"on (loopweave installed on each)") from None


def _cmd_compile(args) -> int:
    import time
    from . import compile as lw_compile, from_onnx
    from .target import resolve_target
    if not args.output and not args.export:
        raise UsageError("give -o model.lwx, --export model.so, or both")
    if args.level and (not args.export or args.params == "side" or args.export.endswith(".o")):
        raise UsageError("--level builds more CPU levels into the one library of --export MODEL.so (weights "
                         "embedded): give --export MODEL.so, without --params side")
    if resolve_target(args.target).kind == "cuda":
        raise UsageError("a network compiled for cuda cannot be saved (-o) or exported (--export) yet: compile "
                         "and run it in Python, lw.compile(lw.from_onnx(path), target='cuda').run(feed); -o and "
                         "--export take CPU targets (llvm ...)")
    t0 = time.perf_counter()
    graph = from_onnx(args.model, input_shapes=_input_shapes(args.input_shape))
    t1 = time.perf_counter()
    exe = lw_compile(graph, target=args.target, progress=not args.quiet, tuning_log=args.tuning_log)
    t2 = time.perf_counter()
    wrote = []
    if args.output:
        exe.save(args.output)
        wrote.append(args.output)
    if args.export:
        levels = [lw_compile(graph, target=level, progress=not args.quiet, tuning_log=args.tuning_log)
                  for level in args.level or ()]
        lib = exe.export_library(args.export, prefix=args.prefix, params=args.params, cc=args.cc, levels=levels)
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
        raise UsageError(f"input {name!r}: the file {path!r} does not exist") from None
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
    from . import compile as lw_compile, from_onnx
    from .extras import require_extra
    from .nn_ops.models import load_onnx_model
    require_extra("onnxruntime", "loopweave bench (the peer it compares with)")
    from .nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime
    model = load_onnx_model(args.model)
    t0 = time.perf_counter()
    exe = lw_compile(from_onnx(model, input_shapes=_input_shapes(args.input_shape)), progress=not args.quiet)
    compile_s = time.perf_counter() - t0
    c = compare_with_onnxruntime(model, exe, threads=args.threads, pairs=args.pairs)
    print(bench_report(args.model, c, args.pairs, args.threads, compile_s))
    return 0


def bench_report(model: str, c, pairs: int, threads: int, compile_s: float) -> str:
    """What ``bench`` measured, each number named: the two medians are each system's own; the
    speed-up is the median of the per-pair ratios, which need not equal the ratio of the medians
    (a machine whose speed drifts between pairs moves both medians, not each pair's ratio)."""
    return (f"{model} ({threads} threads, {pairs} interleaved pairs of runs: loopweave, onnxruntime, ...)\n"
            f"  loopweave    median {c.ours_s * 1e3:.2f} ms per run\n"
            f"  onnxruntime  median {c.theirs_s * 1e3:.2f} ms per run\n"
            f"  speed-up     {c.ratio:.2f}x: the median over the pairs of onnxruntime's time / loopweave's "
            f"(> 1: loopweave is faster); the ratio of the two medians above is {c.theirs_s / c.ours_s:.2f}x\n"
            f"  compile      {compile_s:.1f} s")


def _cmd_info(args) -> int:
    from .target_info import target_info
    print(target_info(args.target, measure=args.peak))
    return 0


def _cmd_zoo(args) -> int:
    from .nn_ops.models import zoo_names
    print("bundled models (seeded weights, built in memory); give one as zoo:NAME to compile, tune, bench "
          "or lw.from_onnx:")
    for name in zoo_names():
        print(f"  zoo:{name}")
    return 0


MODEL_HELP = "model.onnx, or zoo:NAME for a bundled model (list them with 'loopweave zoo')"
SHAPE_HELP = "fix a symbolic input size: NAME=AxBxC (repeat per input), e.g. input=1x3x224x224"


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: every subcommand and option with its help text."""
    from . import __version__
    parser = argparse.ArgumentParser(prog="loopweave", description="loopweave tensor compiler: compile, run, tune "
                                     "and benchmark ONNX models; 'loopweave demo' for a first look")
    parser.add_argument("--version", action="version", version=f"loopweave {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="compile bundled kernels, check them against numpy, print timings")
    demo.add_argument("--size", type=int, default=1024, help="matmul size N (default 1024)")
    demo.add_argument("--quick", action="store_true", help="small sizes, for a fast smoke test")

    sub.add_parser("zoo", help="list the bundled models (zoo:NAME)")

    info = sub.add_parser("info", help="what the code generator knows of this CPU (or --target's): vector width, "
                                       "registers, extensions, threads, caches")
    info.add_argument("--target", default="llvm",
                      help="the CPU to describe (default llvm: this machine, or LOOPWEAVE_HOST_TARGET's), e.g. "
                           "'llvm -mcpu=x86-64-v3'")
    info.add_argument("--peak", action="store_true",
                      help="also measure this machine's fp32 FMA peak and int8 product rate for the target (a few "
                           "seconds; measure on a quiet machine)")

    comp = sub.add_parser("compile", help="compile an ONNX model into an executable file (.lwx) or a C library (.so)")
    comp.add_argument("model", help=MODEL_HELP)
    comp.add_argument("-o", "--output", help="where to write the executable (e.g. model.lwx)")
    comp.add_argument("--export", metavar="MODEL.so",
                      help="also (or instead) write a shared library with a C API and its header MODEL.h beside it")
    comp.add_argument("--prefix", default="lw_", help="prefix of the library's exported C symbols (default lw_)")
    comp.add_argument("--params", choices=("embed", "side"), default="embed",
                      help="with --export: weights inside the library (embed, default) or in MODEL.params beside it")
    comp.add_argument("--target", default="llvm",
                      help="the CPU to compile for: llvm (this machine, default), or e.g. 'llvm -mtriple=aarch64-linux-gnu "
                           "-mcpu=neoverse-n1', 'llvm -mcpu=x86-64-v2' (then --export MODEL.o, or MODEL.so with --cc)")
    comp.add_argument("--level", action="append", metavar="TARGET",
                      help="with --export MODEL.so: also build the network for this x86-64 level and put it in the "
                           "same library (repeatable, e.g. --target 'llvm -mcpu=x86-64-v4' --level 'llvm "
                           "-mcpu=x86-64-v3'); the library runs the first level the CPU has")
    comp.add_argument("--cc", metavar="COMPILER",
                      help="with --export MODEL.so: the C compiler that links it (default $CC or cc; a cross "
                           "compiler such as aarch64-linux-gnu-gcc for another CPU)")
    comp.add_argument("--input-shape", action="append", metavar="NAME=AxBxC", help=SHAPE_HELP)
    comp.add_argument("--tuning-log", metavar="LOG.jsonl",
                      help="apply the best tuning records of this log (from 'loopweave tune'); other kernels keep "
                           "their default schedules")
    comp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    tune = sub.add_parser("tune", help="search schedules for every kernel of an ONNX model; records go to a log")
    tune.add_argument("model", help=MODEL_HELP)
    tune.add_argument("--log", required=True, metavar="LOG.jsonl",
                      help="the tuning log (JSON lines): appended to, and read back to resume")
    tune.add_argument("--trials", type=int, help="measured candidates in all (across the network's kernels)")
    tune.add_argument("--time-budget", metavar="DURATION", help="wall time for the whole search: 90s, 20m, 1h")
    tune.add_argument("--target", default="llvm", help="the CPU to tune for (default llvm: this machine)")
    tune.add_argument("--input-shape", action="append", metavar="NAME=AxBxC", help=SHAPE_HELP)
    tune.add_argument("--size", action="append", metavar="SYMBOL=N",
                      help="a model of symbolic sizes (compiled once) is tuned at one binding of its symbols: this "
                           "one's size (repeat per symbol; default 1 for a leading axis, 64 for the others)")
    tune.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                      help="build and time candidates on the workers of this Dask scheduler, in parallel (one timing "
                           "at a time per machine); the workers need loopweave, and a CPU of the --target's kind")
    tune.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    run = sub.add_parser("run", help="run a compiled executable (.lwx) on inputs from .npy files")
    run.add_argument("model", help="an executable written by 'loopweave compile -o' (an .onnx model is compiled first)")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input array (repeat per input)")
    run.add_argument("--random", action="store_true", help="feed random inputs (when no --input is given)")
    run.add_argument("--output-dir", help="save each output as <name>.npy there instead of printing a summary")

    bench = sub.add_parser("bench", help="latency of loopweave vs onnxruntime on an ONNX model, interleaved")
    bench.add_argument("model", help=MODEL_HELP)
    bench.add_argument("--threads", type=int, default=2, help="threads for each system (default 2)")
    bench.add_argument("--pairs", type=int, default=15,
                       help="timed pairs of runs, loopweave then onnxruntime (default 15)")
    bench.add_argument("--input-shape", action="append", metavar="NAME=AxBxC", help=SHAPE_HELP)
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(size=256 if args.quick else args.size)
    from .errors import LoopweaveError
    handlers = {"compile": _cmd_compile, "run": _cmd_run, "bench": _cmd_bench, "tune": _cmd_tune, "zoo": _cmd_zoo,
                "info": _cmd_info}
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
