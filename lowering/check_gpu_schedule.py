"""``check_gpu_schedule``: reject schedules that cannot run as CUDA kernels, before lowering.

A GPU schedule is legal when every loop nest at the top level is a kernel: the
outermost loops of each root stage are bound to ``blockIdx.*`` axes; stages computed
inside a kernel bind only ``threadIdx.*`` axes (cooperative loading) or none; a
per-thread (``local``) stage binds nothing (other threads could not read what one
thread computed into its private memory); a ``shared`` stage lives inside a kernel;
a stage's reduction loops run inside its thread-bound loops (there is no
cross-thread reduction); ``parallel`` has no meaning on a GPU.  Each error names the
stage, the axis and the fix.  Limits that need bound inference (threads per block,
shared memory size, launch extents) are checked later by ``split_host_device``.
"""
from __future__ import annotations

from ..dsl.schedule import Schedule, Stage
from ..dsl.tensor import ComputeOp
from ..errors import ScheduleError

_EXAMPLE = ("xo, xi = s[{name}].split({axis}, factor=256); "
            "s[{name}].bind(xo, lw.thread_axis('blockIdx.x')); s[{name}].bind(xi, lw.thread_axis('threadIdx.x'))")


def _tag(stage: Stage, iv) -> str:
    thread = stage.bound_threads.get(iv)
    return thread.var.name.replace("_", ".") if thread is not None else ""


def _error(stage: Stage, message: str, fix: str) -> ScheduleError:
    return ScheduleError(f"target 'cuda', stage '{stage.name}': {message}\n  fix: {fix}")


def check_gpu_schedule(schedule: Schedule) -> None:
    """Raise ScheduleError for the first stage that cannot run on a GPU as scheduled."""
    for stage in schedule.stages:
        if not isinstance(stage.op, ComputeOp) or stage.attach_type == "inline":
            continue
        leaves = stage.leaf_iter_vars
        for iv in leaves:
            if stage.annotations.get(iv) == "parallel":
                raise _error(stage, f"axis '{iv.name}' is marked parallel(), which has no meaning on a GPU",
                             f"bind it to a GPU axis instead, e.g. s[{stage.name}].bind({iv.name}, "
                             f"lw.thread_axis('blockIdx.x'))")
        tags = [(iv, _tag(stage, iv)) for iv in leaves]
        seen = {}
        for iv, tag in tags:
            if tag and tag in seen:
                raise _error(stage, f"axes '{seen[tag].name}' and '{iv.name}' are both bound to {tag}",
                             "bind each GPU axis at most once per stage (fuse the axes first if they should share it)")
            if tag:
                seen[tag] = iv
        _check_placement(stage, tags)
        _check_reductions(stage, tags)


def _check_placement(stage: Stage, tags) -> None:
    leaves = stage.leaf_iter_vars
    block_bound = [(iv, t) for iv, t in tags if t.startswith("blockIdx")]
    thread_bound = [(iv, t) for iv, t in tags if t.startswith("threadIdx")]
    if stage.attach_type == "root":
        if stage.scope != "global":
            raise _error(stage, f"a '{stage.scope}' buffer is computed at root, outside any kernel "
                                f"('{stage.scope}' memory exists only inside a kernel)",
                         f"compute_at it inside a blockIdx-bound loop of its consumer, e.g. "
                         f"s[{stage.name}].compute_at(s[consumer], bx)")
        if not leaves:
            raise _error(stage, "a stage without loops cannot be launched as a kernel",
                         "give it at least one axis, or compute_inline it into its consumer")
        first = leaves[0]
        if not tags[0][1].startswith("blockIdx"):
            raise _error(stage, f"its outermost loop '{first.name}' is not bound to a GPU block axis, so it would "
                                "run on the host; on target 'cuda' every loop nest at the top level is a kernel",
                         "bind the outer loops to blockIdx.* and the next ones to threadIdx.*, e.g. "
                         + _EXAMPLE.format(name=stage.name, axis=first.name))
        positions = [leaves.index(iv) for iv, _ in block_bound]
        if positions != list(range(len(positions))):
            inner = block_bound[-1][0]
            raise _error(stage, f"axis '{inner.name}' is bound to {block_bound[-1][1]} but is not among the "
                                "outermost loops; blockIdx-bound loops must enclose every other loop of the kernel",
                         f"reorder so the blockIdx-bound axes come first: s[{stage.name}].reorder(...)")
        if not thread_bound:
            return
    else:
        if block_bound:
            iv, tag = block_bound[0]
            raise _error(stage, f"axis '{iv.name}' is bound to {tag}, but the stage is computed inside "
                                f"'{stage.attach_stage.name}', which is already running inside a kernel",
                         "bind only threadIdx.* axes in stages computed inside a kernel (cooperative loading), "
                         "or compute_root the stage and make it its own kernel")
        if stage.scope in ("local", "warp") and thread_bound:
            iv, tag = thread_bound[0]
            owner = "per-thread" if stage.scope == "local" else "per-warp: its lanes compute the tile together"
            raise _error(stage, f"axis '{iv.name}' is bound to {tag}, but the stage lives in '{stage.scope}' "
                                f"({owner}) memory: each thread would fill only its own part of its private copy",
                         "use cache_read(..., 'shared', ...) for data threads compute together, or leave the "
                         "axes of a 'local' stage unbound")


def _check_reductions(stage: Stage, tags) -> None:
    leaves = stage.leaf_iter_vars
    last_thread = max((k for k, (_, t) in enumerate(tags) if t.startswith("threadIdx")), default=-1)
    if last_thread < 0:
        return
    for k, iv in enumerate(leaves[:last_thread]):
        if iv.kind == "reduce":
            bound, tag = tags[last_thread]
            raise _error(stage, f"reduction loop '{iv.name}' is outside the loop '{bound.name}' bound to {tag}; "
                                "each thread must run the whole reduction of its elements (loopweave has no "
                                "cross-thread reduction)",
                         "reorder so that the threadIdx-bound axes come before the reduction axes, or rfactor "
                         "the reduction (s.rfactor(...)) to bind its parts as a spatial axis")
