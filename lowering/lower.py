"""``lower(schedule, args) -> PrimFunc``: the pass pipeline, as a flat script.

Each pass is a function ``(stmt, ctx) -> stmt`` in its own file; ``dump_after``
keeps the IR after the named pass (``func.dumps[name]``) and ``timings`` records how
long each took, so any stage of lowering can be inspected.  With ``verify.set_verify(True)``
(the test suite's setting) the IR is checked after every pass (``verify.py``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence

from ..dsl.expr import Let, Reduce
from ..dsl.schedule import Schedule
from ..dsl.tensor import ComputeOp, Tensor
from ..dsl.validate import validate_schedule
from ..dsl.visitor import collect_vars, post_order_visit
from ..errors import ExprError, LoweringError
from ..target import resolve_target
from .check_gpu_schedule import check_gpu_schedule
from .ir import PrimFunc
from .passes.insert_bounds_checks import insert_bounds_checks
from .passes.loop_partition import loop_partition
from .passes.pad_register_loops import pad_register_loops
from .passes.hoist_allocations import hoist_allocations
from .passes.pad_tail_tiles import pad_tail_tiles
from .passes.remove_noops import remove_noops
from .passes.distribute_warp_tiles import distribute_warp_tiles
from .passes.double_buffer import double_buffer
from .passes.drop_unit_loops import drop_unit_loops
from .passes.insert_syncs import insert_syncs
from .passes.simplify import simplify
from .passes.split_host_device import split_host_device
from .passes.storage_flatten import storage_flatten
from .symbolic_annotations import warn_symbolic_annotations
from .verify import VerifyMemo, verify, verify_enabled
from .passes.unroll import unroll
from .passes.vectorize import vectorize
from .schedule_to_loops import schedule_to_loops

PASSES = (
    ("simplify", simplify),
    ("loop_partition", loop_partition),
    ("storage_flatten", storage_flatten),
    ("simplify_flat", simplify),
    ("pad_tail_tiles", pad_tail_tiles),
    ("vectorize", vectorize),
    ("unroll", unroll),
    ("simplify_unrolled", simplify),
    ("remove_noops", remove_noops),
    ("drop_unit_loops", drop_unit_loops),
    ("hoist_allocations", hoist_allocations),
)

# checks="bounds" only: before storage_flatten (it needs each dimension's extent)
BOUNDS_CHECK_PASSES = (("insert_bounds_checks", insert_bounds_checks),)

# what ``checks=`` takes: None (only the checks the computation states itself) or "bounds"
CHECKS = (None, "bounds")

# target "cuda" only: after the passes above, the host/device split and GPU barriers; loops of
# one iteration go only after double_buffer, which pipelines the loop it finds whatever its extent
GPU_PASSES = (
    ("double_buffer", double_buffer),
    ("drop_unit_loops", drop_unit_loops),
    ("split_host_device", split_host_device),
    ("insert_syncs", insert_syncs),
)


@dataclass
class PassContext:
    size_vars: list
    storage_aligns: Dict[str, dict]
    storage_orders: Dict[str, tuple] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    double_buffers: Dict[str, bool] = field(default_factory=dict)   # stage name -> filled by cp.async
    func_name: str = "main"
    target: object = None


def _check_argument_names(args: Sequence[Tensor]) -> None:
    """A LoweringError when one tensor is listed twice, or two tensors share a name: the compiled
    function's parameters (and an exported C signature) are named after them."""
    seen = {}
    for k, a in enumerate(args):
        if a.name in seen:
            first = seen[a.name]
            if args[first] is a:
                raise LoweringError(f"the tensor '{a.name}' is listed twice in the arguments (positions {first} "
                                    f"and {k}); list each tensor once")
            raise LoweringError(f"arguments {first} and {k} are two different tensors both named '{a.name}'; give "
                                f"each placeholder its own name (lw.placeholder(shape, name=...)): the compiled "
                                f"function's parameters are named after them")
        seen[a.name] = k


def lower(schedule: Schedule, args: Sequence[Tensor], name: str = "main", dump_after: Optional[str] = None,
          target=None, checks: Optional[str] = None) -> PrimFunc:
    """Lower ``schedule`` to loop IR for a function taking ``args`` (inputs and outputs).

    The schedule is first judged as a whole (``dsl/validate.py``: where each stage is
    computed relative to the others), so the order of the primitive calls does not matter.
    With ``target="cuda"`` the schedule is first checked as a GPU schedule, and the
    result is host code whose loop nests are ``KernelLaunch``es with barriers inserted.
    With ``checks="bounds"``, every load whose index depends on loaded data checks that
    index at run time (``passes/insert_bounds_checks.py``).
    """
    check_checks_argument(checks, LoweringError)
    if not isinstance(schedule, Schedule):
        raise LoweringError(f"lower takes a schedule from lw.create_schedule, got {type(schedule).__name__}")
    args = list(args)
    if not args or not all(isinstance(a, Tensor) for a in args):
        raise LoweringError("lower takes the list of argument tensors (inputs and outputs) after the schedule")
    _check_argument_names(args)
    for out in schedule.outputs:
        if all(schedule.current_tensor(a).op is not out for a in args):
            raise LoweringError(f"the output '{out.name}' of the schedule is not in the argument list")
    if not name.isidentifier():
        raise LoweringError(f"function name {name!r} is not an identifier")
    validate_schedule(schedule)
    warn_symbolic_annotations(schedule)
    _check_free_vars(schedule, args)
    tgt = None
    if target is not None:
        tgt = resolve_target(target)
    passes = PASSES
    if checks == "bounds":
        at = [n for n, _ in passes].index("storage_flatten")
        passes = passes[:at] + BOUNDS_CHECK_PASSES + passes[at:]
    if tgt is not None and tgt.kind == "cuda":
        check_gpu_schedule(schedule)
        at = [n for n, _ in passes].index("vectorize")
        passes = passes[:at] + (("pad_register_loops", pad_register_loops),) + passes[at:]
        passes = tuple(p for p in passes if p[0] != "drop_unit_loops") + GPU_PASSES
        at = [n for n, _ in passes].index("simplify_flat") + 1
        passes = passes[:at] + (("distribute_warp_tiles", distribute_warp_tiles),) + passes[at:]
    start = time.perf_counter()
    body, params, size_vars = schedule_to_loops(schedule, args)
    ctx = PassContext(size_vars, {s.name: dict(s.storage_aligns) for s in schedule.stages if s.storage_aligns},
                      storage_orders={s.name: s.storage_order for s in schedule.stages if s.storage_order},
                      func_name=name, target=tgt,
                      double_buffers={s.name: s.double_buffered == "async" for s in schedule.stages
                                      if s.double_buffered})
    ctx.timings["schedule_to_loops"] = time.perf_counter() - start
    func = PrimFunc(name, params, size_vars, body, param_tensors=args)
    func.dumps["schedule_to_loops"] = body
    checking = verify_enabled()
    memo = VerifyMemo() if checking else None
    if checking:
        verify(func, "schedule_to_loops", memo=memo)
    done = []
    for pass_name, run in passes:
        start = time.perf_counter()
        body = run(body, ctx)
        ctx.timings[pass_name] = time.perf_counter() - start
        done.append(pass_name)
        if checking:
            verify(func.with_body(body), pass_name, done, memo)
        if dump_after in (pass_name, "all"):
            func.dumps[pass_name] = body
    result = func.with_body(body)
    result.timings = ctx.timings
    if dump_after is not None and dump_after not in ("all", "schedule_to_loops") and dump_after not in func.dumps:
        raise LoweringError(f"unknown pass {dump_after!r} for dump_after; passes: "
                            f"schedule_to_loops, {', '.join(n for n, _ in passes)}")
    return result


def check_checks_argument(checks, error) -> None:
    """Raise ``error`` unless ``checks`` is one of ``CHECKS``."""
    if checks not in CHECKS:
        raise error(f"checks={checks!r} is not a kind of run-time check; use checks=None (the default: only "
                    f"the index checks of gathers and scatters) or checks='bounds' (also every load whose "
                    f"index depends on loaded data)")


def _check_free_vars(schedule: Schedule, args) -> None:
    """Every variable in a compute body must be one of its axes, a reduce axis of a
    reducer in it, or a size of the arguments; anything else (typically a reduce_axis
    used outside lw.sum/lw.max/...) would be unbound at run time."""
    sizes = {id(v) for a in args for s in schedule.current_tensor(a).shape for v in collect_vars(s)}
    for stage in schedule.stages:
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue
        bound = {id(iv.var) for iv in list(op.axis) + list(op.reduce_axis)} | sizes

        def note(node):
            if isinstance(node, Reduce):
                bound.update(id(iv.var) for iv in node.axis)
            elif isinstance(node, Let):
                bound.add(id(node.var))
        for b in op.body:
            post_order_visit(b, note)
        for b in op.body:
            for v in collect_vars(b):
                if id(v) not in bound:
                    axes = ", ".join(iv.name for iv in op.axis)
                    raise ExprError(
                        f"compute '{op.name}' uses the variable '{v.name}', which is neither one of its axes "
                        f"({axes}), a reduce axis of a reducer in its body, nor a size of the arguments; "
                        f"a reduce_axis may only appear inside a reducer such as lw.sum(..., axis={v.name})")
