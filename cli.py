"""The ``loopweave`` command line: ``loopweave demo`` (and more as the project grows)."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="loopweave", description="loopweave tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile bundled kernels, check them against numpy, print timings")
    demo.add_argument("--size", type=int, default=1024, help="matmul size N (default 1024)")
    demo.add_argument("--quick", action="store_true", help="small sizes, for a fast smoke test")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo
        return run_demo(size=256 if args.quick else args.size)
    return 1


if __name__ == "__main__":
    sys.exit(main())
