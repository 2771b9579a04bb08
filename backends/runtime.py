"""The runtime module: a compiled function that checks its arguments, then runs.

Every argument is validated in Python before native code sees it: type (numpy
array), dtype, rank, shape (consistent with the symbolic sizes and across
arguments), C-contiguity, writability of outputs.  A mistake raises
``ArgumentError`` naming the argument; nothing unchecked reaches native code.
"""
from __future__ import annotations

import ast
import re
import ctypes
import time
from typing import Dict, List

import numpy as np

from ..dsl.expr import Const, Var
from ..dsl.expr_printer import expr_to_str
from ..errors import ArgumentError, IndexOutOfRangeError
from .module_html import module_html

#: a kernel's packed entry: (argument pointers, size values, error slot)
KERNEL_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
ERROR_SLOT_WORDS = 4    # the kernel's error slot (backends/llvm/codegen.py): message, index, extent, call


def new_error_slot():
    """A zeroed error slot for kernel calls (one per caller: a kernel writes it when an index check fails)."""
    return (ctypes.c_int64 * ERROR_SLOT_WORDS)()


def read_index_error(slot):
    """``(what, index, extent, wraps)`` from a slot a kernel wrote.

    The message pointer points into the kernel's loaded object code: a constant string whose
    first character says whether negative indices count from the end ("1") or not ("0")."""
    raw = ctypes.string_at(slot[0]).decode("utf-8", "replace")
    return raw[1:], int(slot[1]), int(slot[2]), raw[:1] == "1"


def index_error_text(what: str, index: int, extent: int, wraps: bool) -> str:
    """``"index I is out of range for WHAT, of size N (valid: ...)"``."""
    valid = f"{-extent} to {extent - 1}, negative ones counting from the end" if wraps else f"0 to {extent - 1}"
    return f"index {index} is out of range for {what}, of size {extent} (valid: {valid})"


def clear_error_slot(slot) -> None:
    for k in range(ERROR_SLOT_WORDS):
        slot[k] = 0


def _data_pointer_reader():
    """The fastest correct way to read an ndarray's data pointer.

    ``a.ctypes.data`` builds a ctypes helper object (about 1 us per array, which is
    measurable on 30 us kernels).  In CPython an ndarray's data pointer is the first
    field after the object header, so it can be read at ``id(a) + header``; the offset
    is verified here on probe arrays and the slow, public path is kept if it differs.
    """
    header = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    probes = [np.zeros(3, np.float32), np.zeros((2, 5), np.int64)[1:], np.empty(0, np.uint8)]
    read = lambda a: ctypes.c_void_p.from_address(id(a) + header).value or 0  # noqa: E731
    if all(read(a) == a.ctypes.data for a in probes):
        return read
    return lambda a: a.ctypes.data


data_pointer = _data_pointer_reader()


class ParamSpec:
    """What one argument must look like: name, dtype, shape (ints or size vars), is output."""

    def __init__(self, name: str, dtype: str, shape: list, is_output: bool):
        self.name, self.dtype, self.shape, self.is_output = name, dtype, shape, is_output

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "is_output": self.is_output,
                "shape": [s if isinstance(s, int) else {"expr": s} for s in self.shape]}


def _shape_spec(shape, size_names: Dict[int, str]):
    """Each dimension as an int, a size-var name, or an expression string (checked after binding)."""
    out = []
    for s in shape:
        if isinstance(s, Const):
            out.append(int(s.value))
        elif isinstance(s, Var):
            out.append(s.name)
        else:
            out.append(expr_to_str(s))
    return out


class Module:
    """A callable compiled kernel.  ``f(*arrays)`` runs it; ``f.time(*arrays)`` times it."""

    def __init__(self, name: str, address: int, params: List[ParamSpec], size_names: List[str],
                 sources: Dict[str, object], target, keepalive=None):
        self.name, self.params, self.size_names = name, params, size_names
        self.target = target
        self._address = address
        self._entry = KERNEL_ENTRY(address)
        self._sources = sources
        self._keepalive = keepalive
        self._buffers = (ctypes.c_void_p * max(1, len(params)))()
        self._sizes = (ctypes.c_int64 * max(1, len(size_names)))()
        self._err = new_error_slot()
        self._call_args = (ctypes.addressof(self._buffers), ctypes.addressof(self._sizes),
                           ctypes.addressof(self._err))
        self._static = self._static_params()
        self._output_indices = [k for k, p in enumerate(params) if p.is_output]

    def _static_params(self):
        """(dtype, shape) per argument when no shape is symbolic, else None.

        Kernels with static shapes take a fast path through the argument checks (a few
        attribute reads per array); any failure falls back to ``_bind``, which raises
        the full, named error."""
        if self.size_names or any(not isinstance(d, int) for p in self.params for d in p.shape):
            return None
        return tuple((np.dtype(p.dtype), tuple(p.shape)) for p in self.params)

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.dtype}[{', '.join(str(s) for s in p.shape)}]" for p in self.params)
        return f"<loopweave.Module {self.name}({sig}) on {self.target}>"

    # --------------------------------------------------------- validation
    def _bind(self, args) -> Dict[str, int]:
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            if len(args) < len(self.params):
                which = "missing argument(s) " + ", ".join(f"'{p.name}'" for p in self.params[len(args):])
            else:
                which = f"{len(args) - len(self.params)} extra argument(s) after '{self.params[-1].name}'" \
                    if self.params else "it takes no arguments"
            raise ArgumentError(f"{self.name} takes {len(self.params)} arrays ({names}), got {len(args)}: {which}")
        sizes: Dict[str, int] = {}
        for p, a in zip(self.params, args):
            self._check_array(p, a)
            if a.dtype != np.dtype(p.dtype):
                raise ArgumentError(f"argument '{p.name}' must have dtype {p.dtype}, got {a.dtype}; "
                                    f"convert it with .astype('{p.dtype}')")
            if a.ndim != len(p.shape):
                raise ArgumentError(f"argument '{p.name}' must have {len(p.shape)} dimensions, got {a.ndim} "
                                    f"(shape {a.shape})")
            self._check_layout(p, a)
            for d, (want, got) in enumerate(zip(p.shape, a.shape)):
                if isinstance(want, int):
                    if want != got:
                        raise ArgumentError(f"argument '{p.name}' must have shape {self._shape_str(p, sizes)}, "
                                            f"got {a.shape} (dimension {d} should be {want})")
                elif want in self.size_names and want not in sizes:
                    sizes[want] = got
                else:
                    self._bind_multiple(want, got, sizes)
        for p, a in zip(self.params, args):
            for d, (want, got) in enumerate(zip(p.shape, a.shape)):
                if isinstance(want, int):
                    continue
                try:
                    expected = sizes[want] if want in sizes else _eval_shape_expr(want, sizes)
                except NameError:       # a size only this dimension gives, and it does not (not a multiple)
                    raise ArgumentError(f"argument '{p.name}' has shape {a.shape}, but dimension {d} must be "
                                        f"{want} for a whole number {', '.join(n for n in self.size_names if n not in sizes)}"
                                        f" (kernels over whole tiles take only such sizes)") from None
                if expected != got:
                    raise ArgumentError(
                        f"argument '{p.name}' has shape {a.shape}, but dimension {d} must be {want} = {expected} "
                        f"(from the other arguments: {', '.join(f'{k}={v}' for k, v in sizes.items())})")
        for p, a in zip(self.params, args):
            if p.is_output:
                for q, b in zip(self.params, args):
                    if q is not p and self._overlap(a, b):
                        raise ArgumentError(f"argument '{p.name}' is written by {self.name} and overlaps argument "
                                            f"'{q.name}' in memory; pass a separate output array")
        missing = [n for n in self.size_names if n not in sizes]
        if missing:
            raise ArgumentError(f"cannot tell the sizes {', '.join(missing)} from the arguments' shapes")
        return sizes

    def _bind_multiple(self, want: str, got: int, sizes: Dict[str, int]) -> None:
        """A dimension ``k * n`` (or ``n * k``) of a size ``n`` not bound yet binds it to ``got / k``
        where ``k`` divides ``got`` (kernels over whole tiles: a width of ``14 * TW``); otherwise the
        shape check after binding reports the dimension."""
        match = _MULTIPLE.fullmatch(want)
        if match is None:
            return
        k, name = (int(match.group(1)), match.group(2)) if match.group(1) else (int(match.group(4)), match.group(3))
        if name in self.size_names and name not in sizes and k > 0 and got % k == 0:
            sizes[name] = got // k

    def _check_array(self, p: ParamSpec, a) -> None:
        """Whether ``a`` is a kind of array this module takes (here: numpy)."""
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"argument '{p.name}' must be a numpy.ndarray, got {type(a).__name__}")

    def _check_layout(self, p: ParamSpec, a) -> None:
        """Layout checks that depend on the kind of array: dense, and writable if written."""
        if not a.flags.c_contiguous:
            raise ArgumentError(f"argument '{p.name}' must be C-contiguous; pass np.ascontiguousarray(...)")
        if p.is_output and not a.flags.writeable:
            raise ArgumentError(f"argument '{p.name}' is written by {self.name} but is read-only")

    def _overlap(self, a, b) -> bool:
        return np.may_share_memory(a, b)

    def _shape_str(self, p: ParamSpec, sizes) -> str:
        return "(" + ", ".join(str(s) for s in p.shape) + ")"

    def _static_ok(self, args) -> bool:
        """Whether ``args`` pass every check of ``_bind`` (static shapes only; see ``_static_params``)."""
        static = self._static
        if static is None or len(args) != len(static):
            return False
        for a, (dtype, shape) in zip(args, static):
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
                return False
        may_share = np.may_share_memory     # plain loops: a generator costs ~1 us per call here
        for i in self._output_indices:
            a = args[i]
            if not a.flags.writeable:
                return False
            for j, b in enumerate(args):
                if j != i and may_share(a, b):
                    return False
        return True

    def _prepare(self, args):
        if not self._static_ok(args):
            sizes = self._bind(args)
            for k, n in enumerate(self.size_names):
                self._sizes[k] = sizes[n]
        buffers = self._buffers
        for k, a in enumerate(args):
            buffers[k] = data_pointer(a)

    def __call__(self, *args) -> None:
        self._prepare(args)
        self._entry(*self._call_args)
        if self._err[0]:
            self._raise_index_error()

    def _raise_index_error(self):
        what, index, extent, wraps = read_index_error(self._err)
        clear_error_slot(self._err)
        raise IndexOutOfRangeError(f"{self.name}: {index_error_text(what, index, extent, wraps)}; the outputs were "
                                   f"not fully written.\n  fix: pass indices inside the range, or make the "
                                   f"computation clamp or wrap them", index, extent, what)

    def time(self, *args, number: int = 0, repeat: int = 7, min_seconds: float = 0.05) -> float:
        """Median seconds per call, after a warm-up call; ``number`` calls per sample (auto if 0)."""
        self._prepare(args)
        run = lambda: self._entry(*self._call_args)  # noqa: E731
        run()
        if self._err[0]:
            self._raise_index_error()
        if number <= 0:
            number = 1
            while True:
                t0 = time.perf_counter()
                for _ in range(number):
                    run()
                if time.perf_counter() - t0 >= min_seconds / repeat or number >= 1 << 20:
                    break
                number *= 2
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                run()
            samples.append((time.perf_counter() - t0) / number)
        return float(np.median(samples))

    def export_library(self, path, prefix: str = "lw_", cc=None):
        """Write this kernel as a shared library ``path`` with one C function ``PREFIX<name>`` and its
        header beside it (``k.so`` -> ``k.h``); needs a C compiler.  See ``backends/kernel_export.py``."""
        from .kernel_export import export_kernel_library
        return export_kernel_library(self, path, prefix=prefix, cc=cc)

    def get_source(self, fmt: str = "ll") -> str:
        """The generated code: ``"lowered"`` (loop IR), ``"ll"`` (LLVM IR), ``"ll-opt"`` or ``"asm"``."""
        if not self._sources:
            raise ArgumentError(f"kernel {self.name!r} was loaded compiled (from the disk cache or a saved executable) "
                                f"and has no source; to see it, build it again with LOOPWEAVE_CACHE_DIR set to an "
                                f"empty folder")
        if fmt not in self._sources:
            raise ArgumentError(f"no source of kind {fmt!r}; kinds: {', '.join(self._sources)}")
        value = self._sources[fmt]
        return value() if callable(value) else value

    def _repr_html_(self) -> str:
        """Signature, then collapsed lowered IR, LLVM IR and assembly (generated when displayed)."""
        return module_html(self)


_MULTIPLE = re.compile(r"(\d+) \* ([A-Za-z_]\w*)|([A-Za-z_]\w*) \* (\d+)")


_SHAPE_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_SHAPE_EXPR_CHARS = 400


def _eval_shape_expr(text: str, sizes: Dict[str, int]) -> int:
    """Evaluate a printed shape expression such as ``n + 2``, ``n // 2`` or ``max(n, 1)`` with known
    sizes.  Only integer constants, the sizes' names, ``+ - * // %``, negation and ``min`` / ``max``
    are taken (a saved kernel's shapes come from a file): anything else or a division by zero is an
    ``ArgumentError``, a name without a size a ``NameError``.  Nothing is handed to ``eval``."""
    def refuse(why: str):
        raise ArgumentError(f"cannot check the shape expression {text[:80]!r}: {why}")

    def value(node) -> int:
        if isinstance(node, ast.Constant):
            if type(node.value) is not int:
                refuse(f"the constant {node.value!r:.20} is not an integer")
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in sizes:
                raise NameError(node.id)        # the caller says which size is missing
            return int(sizes[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _SHAPE_OPS:
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
                refuse("it divides by zero")
            return _SHAPE_OPS[type(node.op)](a, b)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") \
                and node.args and not node.keywords:
            return (min if node.func.id == "min" else max)(value(a) for a in node.args)
        refuse(f"{type(node).__name__} is not allowed")

    if not isinstance(text, str) or len(text) > _SHAPE_EXPR_CHARS:
        raise ArgumentError(f"cannot check the shape expression {str(text)[:80]!r}: not a short text")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise ArgumentError(f"cannot check the shape expression {text[:80]!r}: {exc}") from None
    return value(tree.body)
