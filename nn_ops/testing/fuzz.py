"""Mutation fuzzing of the ONNX path: damaged models must give loopweave errors, never crashes.

A mutant is an ONNX backend test model (``conformance.collect_cases``) with one change: an
integer attribute set to an extreme value, a declared input shape changed, a fed array of
another shape or dtype, a node input rewired, or bytes of the serialized model flipped.
Each mutant is imported, compiled and run in a long-lived child process (``FuzzWorker``),
so a crash (a signal, an LLVM abort) or a hang is seen and named, and the child is
replaced.  Outcomes:

* ``ok`` - it ran; ``clean`` - a ``LoopweaveError`` (a typed user error);
* ``internal`` - an ``InternalError`` (a loopweave bug, reported as one);
* ``foreign`` - any other Python exception escaping ``from_onnx``/``compile``/``run``;
* ``crash`` - the child died; ``hang`` - it took longer than the time limit;
* ``wrong`` - it ran, onnxruntime ran it too, and the outputs differ (shape, dtype or values beyond
  float32 rounding) from onnxruntime's and from ONNX's reference implementation;
* ``accepts_invalid`` - an attribute mutant that onnxruntime refuses naming that attribute, and
  loopweave ran.

Where loopweave ran a mutant, the same child then runs it in onnxruntime (if installed) and answers
on a second line; onnxruntime crashing or hanging on a mutant is its own affair (``peer``), not
loopweave's.

``tests/nn_ops/onnx_import/test_fuzz_models.py`` runs a fixed budget with hypothesis;
``python -m loopweave.nn_ops.testing.fuzz --cases N`` is the long run.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import List, Optional, Tuple

import numpy as np

from ...backends.python_command import python_code_command

EXTREME_INTS = [-1, 0, 1, 2, 3, 7, 2 ** 31 - 1, -2 ** 31, 10 ** 6, 2 ** 40]
FAILURES = ("foreign", "crash", "hang", "wrong", "accepts_invalid")

_WORKER = r"""
import json, os, pickle, struct, sys, tempfile, warnings
warnings.simplefilter("ignore")
import numpy as np
import loopweave as lw
from loopweave.errors import InternalError, LoopweaveError
PEER_CODE
out = sys.stdout
sys.stdout = sys.stderr          # nothing else may write to the result channel
stdin = sys.stdin.buffer
while True:
    header = stdin.read(4)
    if len(header) < 4:
        break
    model_bytes, feeds, raw, attribute = pickle.loads(stdin.read(struct.unpack("<I", header)[0]))
    outputs = None
    try:
        if raw:
            with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
                f.write(model_bytes)
            try:
                g = lw.from_onnx(f.name)
            finally:
                os.unlink(f.name)
        else:
            import onnx
            g = lw.from_onnx(onnx.ModelProto.FromString(model_bytes))
        exe = lw.compile(g, progress=False)
        outputs = exe.run(feeds)
        result = ("ok", "")
    except InternalError as exc:
        import traceback
        cause = exc.__cause__ or exc
        tb = traceback.extract_tb(cause.__traceback__)[-1] if cause.__traceback__ else None
        where = f" at {tb.filename}:{tb.lineno}" if tb else ""
        result = ("internal", str(exc).splitlines()[0][:300] + where)
    except LoopweaveError as exc:
        result = ("clean", type(exc).__name__)
    except BaseException as exc:
        import traceback
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        result = ("foreign", f"{type(exc).__name__}: {str(exc)[:200]} at {tb.filename}:{tb.lineno}")
    compare = outputs is not None and PEER
    out.write(json.dumps(list(result) + [compare]) + "\n")
    out.flush()
    if compare:
        out.write(json.dumps(peer_verdict(model_bytes, feeds, outputs, attribute)) + "\n")
        out.flush()
"""

_PEER = r"""
try:
    import onnxruntime
    PEER = True
except ImportError:
    PEER = False


def disagreement(outputs, want, peer):
    # why outputs differ from want (shape, dtype, values beyond float rounding), or None
    for k, (got, ref) in enumerate(zip(outputs, want)):
        got, ref = np.asarray(got), np.asarray(ref)
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return f"output {k}: {got.dtype}{list(got.shape)}, {peer} {ref.dtype}{list(ref.shape)}"
        if ref.dtype.kind in "fc":
            scale = float(np.nanmax(np.abs(ref[np.isfinite(ref)]), initial=1.0))
            tolerance = 1e-3 if ref.dtype == np.float16 else 1e-4
            ok = np.allclose(got, ref, rtol=tolerance, atol=tolerance * scale, equal_nan=True)
        else:
            ok = np.array_equal(got, ref)
        if not ok:
            return f"output {k} differs from {peer}'s"
    return None


def peer_verdict(model_bytes, feeds, outputs, attribute):
    try:
        session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
    except Exception as exc:
        text = str(exc)
        if attribute and attribute in text:
            return ["accepts_invalid", f"onnxruntime refuses it: {text.splitlines()[0][:300]}"]
        return ["ok", ""]
    why = disagreement(outputs, want, "onnxruntime")
    if why is None:
        return ["ok", ""]
    try:        # onnxruntime departs from the spec in places (-FLT_MAX for a masked score, not -inf)
        import onnx
        from onnx.reference import ReferenceEvaluator
        reference = ReferenceEvaluator(onnx.ModelProto.FromString(model_bytes)).run(None, feeds)
        if disagreement(outputs, reference, "the reference") is None:
            return ["ok", "onnxruntime differs from ONNX's reference, which loopweave matches"]
    except Exception:
        pass
    return ["wrong", why]
"""


class FuzzWorker:
    """A child process that imports, compiles and runs mutants one at a time."""

    def __init__(self, timeout: float = 30.0, cache_dir: Optional[str] = None):
        self.timeout = timeout
        self.cache_dir = cache_dir or tempfile.mkdtemp(prefix="lw-fuzz-cache-")
        self.proc = None

    def _start(self):
        env = dict(os.environ, LOOPWEAVE_CACHE_DIR=self.cache_dir, PYTHONFAULTHANDLER="1")
        self.proc = subprocess.Popen(python_code_command(_WORKER.replace("PEER_CODE", _PEER)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)

    def run(self, model_bytes: bytes, feeds: dict, raw: bool = False, attribute: str = "") -> Tuple[str, str]:
        """The outcome of one mutant (see the module docstring); ``attribute``: the attribute an
        attribute mutant changed (its name in onnxruntime's refusal makes a run ``accepts_invalid``)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        blob = pickle.dumps((model_bytes, feeds, raw, attribute))
        try:
            self.proc.stdin.write(struct.pack("<I", len(blob)) + blob)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.close()
            return "hang", f"no answer within {self.timeout:.0f} s"
        line = self.proc.stdout.readline()
        if not line:
            return self._died()
        status, detail, compare = json.loads(line)
        if not compare:
            return status, detail
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:            # onnxruntime crashed or hung on it: not loopweave's outcome
            self.close()
            return "ok", "onnxruntime failed on it"
        return tuple(json.loads(line))

    def _died(self) -> Tuple[str, str]:
        code = self.proc.wait()
        self.proc = None
        return "crash", f"child ended with {code}"

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


# ------------------------------------------------------------------ cases and mutations
def fuzz_cases(limit_nodes: int = 3, expanded: bool = False) -> list:
    """Small claimed backend cases (a few nodes, data given): the models mutants start from
    (``expanded``: also the cases whose functions ONNX expanded into several nodes)."""
    from .conformance import collect_cases, is_claimed
    chosen = []
    for case in collect_cases():
        if not case.data_sets or not is_claimed(case) or len(case.model.graph.node) > limit_nodes:
            continue
        if "expanded" in case.name and not expanded:
            continue
        chosen.append(case)
    return sorted(chosen, key=lambda c: c.name)


def has_int_attributes(case) -> bool:
    import onnx
    return any(a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)
               for node in case.model.graph.node for a in node.attribute)


def cases_by_kind(cases) -> dict:
    """The cases each mutation applies to: attribute mutations to models with integer attributes."""
    with_ints = [c for c in cases if has_int_attributes(c)]
    return {kind: with_ints if kind == "attribute" else cases for kind in MUTATIONS}


def _feeds(case) -> dict:
    from .conformance import as_array
    model = case.model
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    return {n: as_array(a) for n, a in zip(names, case.data_sets[0][0])}


MUTATIONS = ("attribute", "declared_shape", "fed_shape", "fed_dtype", "wiring", "bytes")


def mutate(case, kind: str, draw) -> Tuple[bytes, dict, bool, str, str]:
    """(model bytes, feeds, bytes are raw, description, the attribute changed or "") for one mutant;
    ``draw(n)`` picks in range(n)."""
    import onnx
    from onnx import helper
    model = onnx.ModelProto.FromString(case.model.SerializeToString())
    feeds = _feeds(case)
    graph = model.graph
    what, attribute = kind, ""
    if kind == "attribute":
        ints = [(node, a) for node in graph.node for a in node.attribute
                if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if ints:
            node, a = ints[draw(len(ints))]
            value = EXTREME_INTS[draw(len(EXTREME_INTS))]
            if a.type == onnx.AttributeProto.INT:
                a.i = value
            elif len(a.ints):
                a.ints[draw(len(a.ints))] = value
            else:
                a.ints.append(value)
            what, attribute = f"{node.op_type}.{a.name} <- {value}", a.name
        else:       # add a common attribute the node may not expect
            node = graph.node[draw(len(graph.node))]
            name = ["axis", "strides", "pads", "kernel_shape", "group", "keepdims"][draw(6)]
            value = EXTREME_INTS[draw(len(EXTREME_INTS))]
            node.attribute.append(helper.make_attribute(name, value if name in ("axis", "group", "keepdims")
                                                        else [value]))
            what, attribute = f"{node.op_type}.{name} added = {value}", name
    elif kind == "declared_shape":
        inputs = [i for i in graph.input if i.type.tensor_type.shape.dim]
        if inputs:
            vi = inputs[draw(len(inputs))]
            dims = vi.type.tensor_type.shape.dim
            d = dims[draw(len(dims))]
            value = [0, 1, 2, 10 ** 6, 2 ** 31 - 1][draw(5)]
            d.ClearField("dim_param")
            d.dim_value = value
            what = f"input {vi.name} dim <- {value}"
    elif kind in ("fed_shape", "fed_dtype") and feeds:
        name = sorted(feeds)[draw(len(feeds))]
        arr = np.asarray(feeds[name])
        if kind == "fed_shape":
            shapes = [arr.shape + (1,), arr.shape[1:], tuple(d + 1 for d in arr.shape), (0,) + arr.shape[1:]]
            shape = shapes[draw(len(shapes))]
            feeds[name] = np.zeros(shape, arr.dtype)
            what = f"feed {name} shape {arr.shape} -> {shape}"
        else:
            dtype = ["float64", "int64", "int32", "bool", "float16", "uint8"][draw(6)]
            try:
                with np.errstate(all="ignore"):
                    feeds[name] = arr.astype(dtype)
            except (ValueError, TypeError):     # strings that are not numbers: feed zeros
                feeds[name] = np.zeros(arr.shape, dtype)
            what = f"feed {name} dtype {arr.dtype} -> {dtype}"
    elif kind == "wiring":
        node = graph.node[draw(len(graph.node))]
        names = [i.name for i in graph.input] + [o for n in graph.node for o in n.output] + [""]
        if node.input:
            k = draw(len(node.input))
            new = names[draw(len(names))]
            what = f"{node.op_type} input {k}: {node.input[k]} -> {new!r}"
            node.input[k] = new
    data = model.SerializeToString()
    raw = False
    if kind == "bytes" and data:
        data = bytearray(data)
        for _ in range(1 + draw(4)):
            data[draw(len(data))] ^= 1 << draw(8)
        data, raw = bytes(data), True
        what = "bytes flipped"
    return data, feeds, raw, f"{case.name}: {what}", attribute


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--max-nodes", type=int, default=3, help="mutate cases of at most this many nodes")
    parser.add_argument("--expanded", action="store_true", help="include the expanded-function cases")
    args = parser.parse_args(argv)
    by_kind = cases_by_kind(fuzz_cases(args.max_nodes, args.expanded))
    cases = by_kind["fed_shape"]
    rng = np.random.default_rng(args.seed)
    worker = FuzzWorker(timeout=args.timeout)
    counts: Counter = Counter()
    counts_by_kind: Counter = Counter()
    failures: List[str] = []
    start = time.perf_counter()
    try:
        for _ in range(args.cases):
            kind = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
            case = by_kind[kind][int(rng.integers(len(by_kind[kind])))]
            data, feeds, raw, what, attribute = mutate(case, kind, lambda n: int(rng.integers(n)))
            status, detail = worker.run(data, feeds, raw, attribute)
            counts[status] += 1
            counts_by_kind[(kind, status)] += 1
            if status in FAILURES or status == "internal":
                failures.append(f"{status}: {what}: {detail}")
    finally:
        worker.close()
    print(f"{args.cases} mutants of {len(cases)} backend cases in {time.perf_counter() - start:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for kind in MUTATIONS:
        print(f"  {kind}: " + ", ".join(f"{s} {counts_by_kind[(kind, s)]}" for s in
                                         ("ok", "clean", "internal", *FAILURES) if counts_by_kind[(kind, s)]))
    for line in failures:
        print("  " + line)
    return 1 if any(counts[k] for k in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
