"""What the code generator knows of a CPU target, in one place to read: ``lw.target_info()``.

The defaults of the op library derive from these facts (vector width per dtype, vector
registers, FMA, a dot-product instruction), never from a CPU's name.  Cache sizes are read from
the machine (Linux sysfs) when the target is this machine's architecture; for another CPU they
are not known and shown as such.  ``loopweave info`` prints it.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple

from .target import Target, native_target, resolve_target

#: the vector extensions worth naming (what generated code can use beyond the vector width)
_EXTENSIONS = ("fma", "f16c", "avx512vnni", "avxvnni", "avx512bf16", "avx512fp16", "avx512vbmi", "gfni", "neon")

_SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class TargetInfo:
    target: str                       # Target's own description
    arch: str
    cpu: str
    vector_bits: int
    lanes: Dict[str, int]             # elements per vector register, by dtype
    vector_registers: int
    extensions: Tuple[str, ...]       # the named vector extensions the code may use
    threads: int
    caches: Optional[Tuple[Tuple[str, int], ...]] = None   # ("L1d", bytes) ...; None: not known
    notes: Tuple[str, ...] = field(default=())

    def rows(self) -> list:
        """(label, value) pairs, as printed."""
        caches = ", ".join(f"{name} {_size(n)}" for name, n in self.caches) if self.caches else \
            "not known (not this machine's CPU)"
        return [("target", self.target), ("architecture", f"{self.arch}, cpu {self.cpu}"),
                ("vector width", f"{self.vector_bits} bits: " + ", ".join(f"{n} {d}" for d, n in self.lanes.items())),
                ("vector registers", str(self.vector_registers)),
                ("extensions", ", ".join(self.extensions) or "none beyond the vector width"),
                ("threads", str(self.threads)), ("caches", caches)] + [("note", n) for n in self.notes]

    def __str__(self) -> str:
        return "\n".join(f"{label:<18}{value}" for label, value in self.rows())

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
                       f"<td style='text-align:left'>{html.escape(value)}</td></tr>" for label, value in self.rows())
        return f"<table>{rows}</table>"


def _size(n: int) -> str:
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n // 1024} KiB"


def _host_caches() -> Optional[Tuple[Tuple[str, int], ...]]:
    """This machine's caches as seen by its first CPU (Linux sysfs), or None where not readable."""
    found = []
    for index in sorted(_SYSFS_CACHE.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size[:-1].isdigit():
            continue
        scale = {"K": 1024, "M": 1 << 20}.get(size[-1])
        if scale is None:
            continue
        found.append((f"L{level}" + ("d" if kind == "Data" else ""), int(size[:-1]) * scale))
    return tuple(found) or None


def target_info(target="llvm") -> TargetInfo:
    """What ``target`` (default: the CPU ``"llvm"`` means here) offers the code generator."""
    tgt: Target = resolve_target(target)
    if tgt.kind != "llvm":
        from .errors import BuildError
        raise BuildError(f"target_info describes CPU targets ('llvm ...'), not {target!r}")
    enabled = tgt.enabled_features()
    notes = []
    if tgt.runs_here() and tgt != native_target():
        notes.append(f"this machine is a {native_target().cpu}; code for this target runs on it")
    elif not tgt.runs_here():
        notes.append("this machine cannot run code for this target (export it)")
    return TargetInfo(
        target=str(tgt), arch=tgt.arch, cpu=tgt.cpu, vector_bits=tgt.vector_bits,
        lanes={d: tgt.lanes(d) for d in ("float32", "float16", "int8")}, vector_registers=tgt.vector_registers,
        extensions=tuple(e for e in _EXTENSIONS if e in enabled or (e == "fma" and tgt.has_fma)),
        threads=tgt.num_threads, caches=_host_caches() if tgt.runs_here() else None, notes=tuple(notes))
