"""split_host_device: each top-level loop nest bound to blockIdx becomes a KernelLaunch.

Before: lowered loop IR for target ``cuda`` (after remove_noops), whose top level is
made of Seq, host Allocates (``global`` intermediates), LetStmts and loop nests whose
outermost loop is bound to a ``blockIdx`` axis (``check_gpu_schedule`` made sure).
After: the same top level with every such nest wrapped in a ``KernelLaunch`` carrying
its launch extents (grid: the blockIdx-bound loops' extents, in the size variables;
block: the threadIdx-bound loops' constant extents), the outside buffers it uses and
the scalars it reads.  Guarantees, or raises LoweringError naming the loop and the
fix: nothing but kernels runs loops on the host; within one kernel every loop bound
to one GPU axis has the same extent (the launch extent, so no thread needs a guard);
threads per block and static shared memory fit the target's limits; per-thread and
shared buffers have constant sizes.
"""
from __future__ import annotations

from typing import Dict, List

from ...dsl import dtypes
from ...dsl.expr import Const, Let, Var, const
from ...dsl.expr_printer import expr_to_str
from ...dsl.visitor import children, collect_vars, post_order_visit
from ...errors import LoweringError
from ..ir import Allocate, BufferLoad, BufferStore, For, KernelLaunch, LetStmt, Seq, seq

MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_YZ = 65535


def _written_names(stmt) -> List[str]:
    names: List[str] = []
    post_order_visit(stmt, lambda n: names.append(n.buffer.name)
                     if isinstance(n, BufferStore) and n.buffer.name not in names else None)
    return names


def _pre_order_visit(node, callback) -> None:
    """Parents before children, in program order (so messages list loops outermost first)."""
    stack = [node]
    while stack:
        current = stack.pop()
        callback(current)
        stack.extend(reversed(list(children(current))))


class _Splitter:
    def __init__(self, ctx):
        self.ctx = ctx
        self.size_ids = {id(v) for v in ctx.size_vars}
        self.host_lets: Dict[int, Var] = {}
        self.count = 0
        self.limit_threads = getattr(ctx.target, "max_threads_per_block", 1024)
        self.limit_shared = getattr(ctx.target, "max_shared_memory_per_block", 48 * 1024)

    def host(self, s):
        if isinstance(s, Seq):
            return seq(*[self.host(c) for c in s.stmts])
        if isinstance(s, Allocate):
            if s.buffer.scope != "global":
                raise LoweringError(f"buffer '{s.buffer.name}' in '{s.buffer.scope}' memory is allocated on the host; "
                                    f"compute_at its stage inside a blockIdx-bound loop")
            return Allocate(s.buffer, s.extent, self.host(s.body))
        if isinstance(s, LetStmt):
            self.host_lets[id(s.var)] = s.var
            return LetStmt(s.var, s.value, self.host(s.body))
        if isinstance(s, For) and s.kind == "thread" and dict(s.annotations).get("thread", "").startswith("blockIdx"):
            return self.kernel(s)
        if isinstance(s, For):
            stages = ", ".join(f"'{n}'" for n in _written_names(s))
            raise LoweringError(
                f"target 'cuda': the loop '{s.var.name}' (computing {stages}) would run on the host, outside any "
                f"kernel.\n  fix: bind the outermost loop of that stage to lw.thread_axis('blockIdx.x') (and an "
                f"inner one to threadIdx.x), or compute_at the stage inside a kernel")
        raise LoweringError(f"target 'cuda': a {type(s).__name__} would run on the host outside any kernel "
                            f"(writing {', '.join(_written_names(s)) or 'nothing'}); bind it to GPU axes")

    # ------------------------------------------------------------------ kernels
    def kernel(self, nest: For) -> KernelLaunch:
        extents: Dict[str, list] = {}
        local_ids = set()
        shared_bytes = 0
        shared_names = []
        used_buffers = []
        allocated = set()

        def visit(n):
            nonlocal shared_bytes
            if isinstance(n, For):
                local_ids.add(id(n.var))
                tag = dict(n.annotations).get("thread") if n.kind == "thread" else None
                if tag:
                    extents.setdefault(tag, []).append(n)
                if n.kind == "parallel":
                    raise LoweringError(f"loop '{n.var.name}' is parallel() inside a GPU kernel; bind it to a "
                                        f"thread axis instead")
            elif isinstance(n, (LetStmt, Let)):
                local_ids.add(id(n.var))
            elif isinstance(n, Allocate):
                allocated.add(id(n.buffer))
                buf = n.buffer
                if not isinstance(n.extent, Const):
                    raise LoweringError(
                        f"buffer '{buf.name}' ({buf.scope}) inside a kernel has the non-constant size "
                        f"{expr_to_str(n.extent)}; GPU {buf.scope} buffers need a size known at compile time.\n"
                        f"  fix: split the consumer's loops by constant factors so the region per "
                        f"{'block' if buf.scope == 'shared' else 'thread'} is constant")
                if buf.scope == "global":
                    raise LoweringError(f"buffer '{buf.name}' is allocated in global memory inside a kernel; "
                                        f"use scope 'local' or 'shared', or compute it at root")
                if buf.scope == "shared":
                    shared_bytes += n.extent.value * dtypes.itemsize(buf.dtype)
                    shared_names.append(buf.name)
            elif isinstance(n, (BufferLoad, BufferStore)):
                if all(n.buffer is not b for b in used_buffers):
                    used_buffers.append(n.buffer)
        _pre_order_visit(nest, visit)
        written = set()
        post_order_visit(nest, lambda n: written.add(id(n.buffer)) if isinstance(n, BufferStore) else None)
        outside = [b for b in used_buffers if id(b) not in allocated]
        params = tuple([b for b in outside if id(b) not in written] + [b for b in outside if id(b) in written])
        grid = self._launch_extents(extents, "blockIdx", nest)
        block = self._launch_extents(extents, "threadIdx", nest)
        threads = 1
        for k, e in enumerate(block):
            if e.value > MAX_BLOCK_DIMS[k]:
                raise LoweringError(f"kernel at loop '{nest.var.name}': threadIdx.{'xyz'[k]} has extent {e.value}, "
                                    f"over the limit {MAX_BLOCK_DIMS[k]}; split that axis by a smaller factor")
            threads *= e.value
        if threads > self.limit_threads:
            dims = " x ".join(str(e.value) for e in block)
            raise LoweringError(
                f"kernel computing {', '.join(_written_names(nest))}: {threads} threads per block ({dims}) is over "
                f"the limit of {self.limit_threads}.\n  fix: split the threadIdx-bound axes by smaller factors "
                f"(move the rest into a serial loop inside each thread)")
        for k, e in enumerate(grid[1:], start=1):
            if isinstance(e, Const) and e.value > MAX_GRID_YZ:
                raise LoweringError(f"blockIdx.{'xyz'[k]} has extent {e.value}, over the limit {MAX_GRID_YZ}; "
                                    f"bind the largest axis to blockIdx.x")
        if shared_bytes > self.limit_shared:
            raise LoweringError(
                f"kernel computing {', '.join(_written_names(nest))}: its shared buffers "
                f"({', '.join(shared_names)}) take {shared_bytes} bytes, over the {self.limit_shared}-byte static "
                f"shared memory limit per block.\n  fix: use smaller tiles (split the blockIdx-bound axes or the "
                f"reduction axis that the shared stages are computed at by smaller factors)")
        scalars = []
        for v in collect_vars(nest):
            if id(v) in local_ids or any(v is s for s in scalars):
                continue
            if id(v) in self.size_ids or id(v) in self.host_lets:
                scalars.append(v)
            elif v.dtype != "handle":
                raise LoweringError(f"kernel at loop '{nest.var.name}' reads '{v.name}', which is not defined "
                                    f"inside it nor a size of the arguments")
        self.count += 1
        name = f"{self.ctx.func_name}_kernel{self.count - 1}"
        return KernelLaunch(name, grid, block, params, tuple(scalars), nest)

    def _launch_extents(self, extents, axis: str, nest: For):
        out = []
        for c in "xyz":
            loops = extents.get(f"{axis}.{c}", [])
            if not loops:
                out.append(const(1))
                continue
            first = loops[0].extent
            for other in loops[1:]:
                if not bool(other.extent == first):
                    raise LoweringError(
                        f"{axis}.{c} is bound to loops '{loops[0].var.name}' (extent {expr_to_str(first)}) and "
                        f"'{other.var.name}' (extent {expr_to_str(other.extent)}) in one kernel; all loops bound "
                        f"to one GPU axis in a kernel must have the same extent.\n  fix: split them by the same "
                        f"factor (e.g. split a cooperative-loading loop by the consumer's thread count)")
            if axis == "threadIdx" and not isinstance(first, Const):
                raise LoweringError(f"{axis}.{c} is bound to loop '{loops[0].var.name}' of non-constant extent "
                                    f"{expr_to_str(first)}; the block size must be a constant.\n  fix: split the "
                                    f"axis by a constant factor and bind the inner part to {axis}.{c}")
            bad = [v.name for v in collect_vars(first) if id(v) not in self.size_ids and id(v) not in self.host_lets]
            if bad:
                raise LoweringError(f"the extent {expr_to_str(first)} of the loop '{loops[0].var.name}' bound to "
                                    f"{axis}.{c} depends on {', '.join(bad)}, which the host does not know at "
                                    f"launch; bind an axis whose extent depends only on the sizes")
            out.append(first)
        return tuple(out)


def split_host_device(stmt, ctx):
    return _Splitter(ctx).host(stmt)
