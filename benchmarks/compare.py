"""The interleaved-timing helpers, from the package (``loopweave.backends.timing``), and the
``--target`` option the kernel benchmarks share."""
from loopweave.backends.timing import Comparison, interleaved, set_threads
from loopweave.target import compiling_for, resolve_target

__all__ = ["Comparison", "add_target_argument", "interleaved", "run_for_target", "set_threads"]


def add_target_argument(parser) -> None:
    """``--target``: code for another level this machine runs (AVX2 on an AVX-512 CPU)."""
    parser.add_argument("--target", default="llvm",
                        help="the code's target, one this machine runs (e.g. 'llvm -mcpu=x86-64-v3')")


def run_for_target(parser, args, run) -> None:
    """``run(args)`` with every compile for ``args.target``; a level this machine cannot run is a usage
    error (its code could be built but not timed)."""
    target = resolve_target(args.target)
    if not target.runs_here():
        parser.error(f"--target {args.target!r}: this machine cannot run its code; name a level it runs")
    with compiling_for(target):
        run(args)
