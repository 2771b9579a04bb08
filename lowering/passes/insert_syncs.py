"""insert_syncs: block-wide barriers around the statements that fill shared memory.

Before: KernelLaunch bodies in which a ``shared`` buffer is written by one statement
of a Seq (a cooperative loading nest, by threads that are not the ones reading) and
read by later statements or later iterations of an enclosing loop.
After: in every Seq inside a kernel, each run of consecutive statements that write
shared memory is preceded by ``__syncthreads()`` (the previous readers, e.g. of the
last iteration of a reduction loop, are done before it is overwritten) unless it
opens the kernel, and followed by one (the writes are visible before anyone reads).
Then every barrier is checked to be reached by all threads of the block: not under a
condition, or inside a loop whose bounds, that depend on a threadIdx-bound variable;
otherwise LoweringError (a divergent barrier hangs or corrupts the kernel).
"""
from __future__ import annotations

from ...dsl.expr import Call
from ...dsl.visitor import Mutator, children, collect_vars, post_order_visit
from ...errors import LoweringError
from ..ir import SYNC_THREADS, BufferLoad, BufferStore, Evaluate, For, IfThenElse, KernelLaunch, Seq, seq


def sync_threads() -> Evaluate:
    return Evaluate(Call(SYNC_THREADS, (), "int32"))


def _is_sync(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.name == SYNC_THREADS


def writes_shared(s) -> bool:
    hit = []
    post_order_visit(s, lambda n: hit.append(1) if isinstance(n, BufferStore) and n.buffer.scope == "shared" else None)
    return bool(hit)


def reads_shared(s) -> bool:
    hit = []
    post_order_visit(s, lambda n: hit.append(1) if isinstance(n, BufferLoad) and n.buffer.scope == "shared" else None)
    return bool(hit)


def _self_contained(s) -> bool:
    """A thread-bound loop of one shared stage's own nest: it writes one shared buffer and reads no
    other shared memory, so each thread only rereads the elements it wrote itself (a reduction
    into shared memory updates its own element): no barrier is needed inside it."""
    if not (isinstance(s, For) and s.kind == "thread"):
        return False
    written, read = set(), set()
    post_order_visit(s, lambda n: written.add(id(n.buffer)) if isinstance(n, BufferStore) else
                     read.add(id(n.buffer)) if isinstance(n, BufferLoad) and n.buffer.scope == "shared" else None)
    stores = []
    post_order_visit(s, lambda n: stores.append(n.buffer) if isinstance(n, BufferStore) else None)
    return len(written) == 1 and stores[0].scope == "shared" and read <= written


class _InsertInKernel(Mutator):
    def visit_For(self, node):
        if _self_contained(node) or dict(node.annotations).get("double_buffered"):
            return node     # double_buffer placed this loop's one barrier per iteration itself
        return self.generic_visit(node)

    def visit_Seq(self, node):
        stmts = [self.visit(c) for c in node.stmts]
        out = []
        k = 0
        while k < len(stmts):
            if not _fills_shared(node.stmts[k]):
                if out and _is_sync(out[-1]):
                    out.append(_drop_leading_sync(stmts[k]))
                else:
                    out.append(stmts[k])
                k += 1
                continue
            end = k
            while end < len(stmts) and _fills_shared(node.stmts[end]):
                end += 1
            if not (out and _is_sync(out[-1])):
                out.append(sync_threads())
            out.extend(stmts[k:end])
            out.append(sync_threads())
            k = end
        out = _merge_adjacent_copies(out)
        if len(out) == len(node.stmts) and all(a is b for a, b in zip(out, node.stmts)):
            return node
        return seq(*out)


def _pure_writer(s) -> bool:
    return writes_shared(s) and not reads_shared(s)


def _shared_written(s) -> set:
    names = set()
    post_order_visit(s, lambda n: names.add(id(n.buffer)) if isinstance(n, BufferStore) and n.buffer.scope == "shared"
                     else None)
    return names


def _first_executed(s):
    while True:
        if isinstance(s, Seq) and s.stmts:
            s = s.stmts[0]
        elif type(s).__name__ in ("LetStmt", "Allocate"):
            s = s.body
        else:
            return s


def _merge_adjacent_copies(out: list) -> list:
    """Drop the barrier between two copies into shared memory that read none of it (e.g. the A
    and B panels of a matmul, nested in each other's allocation): the barrier after the second
    one covers both."""
    merged = list(out)
    k = 1
    while k + 1 < len(merged):
        if _is_sync(merged[k]) and _pure_writer(merged[k - 1]):
            nxt = _first_executed(merged[k + 1])
            if _pure_writer(nxt) and not (_shared_written(nxt) & _shared_written(merged[k - 1])):
                del merged[k]
                continue
        k += 1
    return merged


def _fills_shared(s) -> bool:
    return writes_shared(s) and not _reads_shared_only_inside(s)


def _drop_leading_sync(s):
    """``s`` without the barrier it starts with (through lets and allocations): the
    statement before it was a barrier already."""
    if _is_sync(s):
        return seq()
    if isinstance(s, Seq) and s.stmts:
        first = _drop_leading_sync(s.stmts[0])
        return s if first is s.stmts[0] else seq(first, *s.stmts[1:])
    if type(s).__name__ in ("LetStmt", "Allocate"):
        body = _drop_leading_sync(s.body)
        return s if body is s.body else type(s)(*[getattr(s, f) if f != "body" else body
                                                  for f in s.__dataclass_fields__])
    return s


def _reads_shared_only_inside(s) -> bool:
    """A statement that both fills and consumes shared memory (e.g. a loop around loading and
    computing): its barriers go inside it, where the filling statements are."""
    return reads_shared(s) and _has_inner_seq_writer(s)


def _has_inner_seq_writer(s) -> bool:
    """Whether barriers go inside ``s``: a Seq in it (outside self-contained nests) both fills and reads shared memory."""
    stack = [s]
    while stack:
        n = stack.pop()
        if _self_contained(n):
            continue
        if isinstance(n, Seq) and any(writes_shared(c) for c in n.stmts) and any(reads_shared(c) for c in n.stmts):
            return True
        stack.extend(c for c in children(n) if not isinstance(c, (BufferLoad,)) and hasattr(c, "__dataclass_fields__")
                     and type(c).__name__ in ("Seq", "For", "IfThenElse", "LetStmt", "Allocate"))
    return False


def _check_uniform(kernel: KernelLaunch) -> None:
    thread_vars = set()

    def walk(s, divergent: str):
        if _is_sync(s) and divergent:
            raise LoweringError(f"kernel '{kernel.name}': a __syncthreads() barrier would sit {divergent}, which not "
                                f"every thread of the block reaches.\n  fix: make the shared stages' regions and "
                                f"loops independent of threadIdx (compute_at them at a loop outside the "
                                f"thread-dependent condition)")
        if isinstance(s, For):
            if s.kind == "thread" and dict(s.annotations).get("thread", "").startswith("threadIdx"):
                thread_vars.add(id(s.var))
            bounds = collect_vars(s.min) + collect_vars(s.extent)
            inner = divergent or (f"inside loop '{s.var.name}', whose bounds depend on the thread index"
                                  if any(id(v) in thread_vars for v in bounds) else "")
            walk(s.body, inner)
        elif isinstance(s, IfThenElse):
            cond = divergent or ("under the condition of an if" if any(id(v) in thread_vars
                                                                        for v in collect_vars(s.condition)) else "")
            walk(s.then_case, cond)
            if s.else_case is not None:
                walk(s.else_case, cond)
        elif isinstance(s, Seq):
            for c in s.stmts:
                walk(c, divergent)
        elif hasattr(s, "body"):
            if type(s).__name__ == "LetStmt" and any(id(v) in thread_vars for v in collect_vars(s.value)):
                thread_vars.add(id(s.var))
            walk(s.body, divergent)
    walk(kernel.body, "")


class _Insert(Mutator):
    def visit_KernelLaunch(self, node):
        body = _InsertInKernel().visit(node.body)
        result = node if body is node.body else KernelLaunch(node.name, node.grid, node.block, node.params,
                                                             node.scalars, body)
        _check_uniform(result)
        return result


def insert_syncs(stmt, ctx):
    return _Insert().visit(stmt)
