"""What the code generator knows of a CPU target, in one place to read: ``lw.target_info()``.

The defaults of the op library derive from these facts (vector width per dtype, vector
registers, FMA, a dot-product instruction), never from a CPU's name.  Cache sizes are read from
the machine (Linux sysfs) when the target's code runs here, else taken from ``CPU_CORES``
(``backends/llvm/cpu_facts.py``) by the target's ``-mcpu``; so is the FMA rate (fp32 FLOP per cycle and core at each vector width: Zen 4 runs
a 512-bit FMA as two 256-bit halves, Zen 5 and Intel's server cores at full width).  A CPU the table
does not know has them "not known": ``python -m benchmarks.peak`` measures this machine's rate.
``loopweave info`` prints it.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

from .backends.llvm.cpu_facts import CPU_CORES, CoreFacts, core_facts, fma_instructions  # noqa: F401 - the facts' home
from .target import Target, native_target, resolve_target

#: the vector extensions worth naming (what generated code can use beyond the vector width)
_EXTENSIONS = ("fma", "f16c", "avx512vnni", "avxvnni", "avx512bf16", "avx512fp16", "avx512vbmi", "gfni", "neon")

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
    flops_per_cycle: Optional[int] = None   # fp32 FLOP per cycle and core with this target's vectors
    full_width_flops: Optional[int] = None  # the same at the CPU's widest vectors, where it differs
    core: str = ""                          # the CPU model the rate and caches are of
    measured: Tuple[Tuple[str, str], ...] = ()   # (what, figure) measured on this machine (``measure=True``)

    @property
    def fma_instructions_per_cycle(self) -> Optional[float]:
        """Vector FMA instructions a core issues per cycle with this target's vectors (None: not known)."""
        return fma_instructions(self.flops_per_cycle, self.vector_bits)

    def cache(self, level: str) -> Optional[int]:
        """The size in bytes of cache ``level`` ("L1d", "L2", "L3"), None where not known."""
        return dict(self.caches).get(level) if self.caches else None

    def rows(self) -> list:
        """(label, value) pairs, as printed."""
        caches = ", ".join(f"{name} {_size(n)}" for name, n in self.caches) if self.caches else \
            "not known (not this machine's CPU, nor one loopweave has figures for)"
        if self.flops_per_cycle is None:
            rate = "not known (python -m benchmarks.peak measures this machine's)"
        else:
            rate = f"{self.flops_per_cycle} fp32 FLOP per cycle and core with {self.vector_bits}-bit vectors"
            if self.full_width_flops and self.full_width_flops != self.flops_per_cycle:
                rate += f" ({self.full_width_flops} at the CPU's widest)"
            rate += f" on {self.core}"
        return [("target", self.target), ("architecture", f"{self.arch}, cpu {self.cpu}"),
                ("vector width", f"{self.vector_bits} bits: " + ", ".join(f"{n} {d}" for d, n in self.lanes.items())),
                ("vector registers", str(self.vector_registers)),
                ("extensions", ", ".join(self.extensions) or "none beyond the vector width"),
                ("FMA rate", rate), ("threads", str(self.threads)), ("caches", caches)] + \
            [("measured", f"{what}: {figure}") for what, figure in self.measured] + [("note", n) for n in self.notes]

    def __str__(self) -> str:
        return "\n".join(f"{label:<18}{value}" for label, value in self.rows())

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
                       f"<td style='text-align:left'>{html.escape(value)}</td></tr>" for label, value in self.rows())
        return f"<table>{rows}</table>"


def _size(n: int) -> str:
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n // 1024} KiB"


def target_info(target="llvm", measure: bool = False) -> TargetInfo:
    """What ``target`` (default: the CPU ``"llvm"`` means here) offers the code generator; with
    ``measure``, and where this machine runs the target's code, its fp32 FMA peak and int8 product
    rate measured now (``backends/llvm/peak.py``: a second or two; a busy machine measures less)."""
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
    facts = core_facts(tgt)
    return TargetInfo(
        target=str(tgt), arch=tgt.arch, cpu=tgt.cpu, vector_bits=tgt.vector_bits,
        lanes={d: tgt.lanes(d) for d in ("float32", "float16", "int8")}, vector_registers=tgt.vector_registers,
        extensions=tuple(e for e in _EXTENSIONS if e in enabled or (e == "fma" and tgt.has_fma)),
        threads=tgt.num_threads, caches=facts.caches, notes=tuple(notes), flops_per_cycle=facts.flops_per_cycle,
        full_width_flops=facts.full_width_flops, core=facts.core,
        measured=_measured(tgt) if measure and tgt.runs_here() else ())


def _measured(tgt: Target) -> Tuple[Tuple[str, str], ...]:
    """The FMA peak at the target's width and the int8 product rate, on one thread and on all."""
    from .backends.llvm.peak import fma_peak, int8_peak, int8_widths
    rows = []
    counts = sorted({1, tgt.num_threads})
    flops = ", ".join(f"{fma_peak(n, tgt) / 1e9:.0f} ({n} thread{'s' if n > 1 else ''})" for n in counts)
    rows.append((f"fp32 FMA peak, {tgt.vector_bits}-bit (GFLOPS)", flops))
    if tgt.arch == "x86_64":
        bits, vnni = int8_widths(tgt)
        ops = ", ".join(f"{2 * int8_peak(n, tgt) / 1e9:.0f} ({n} thread{'s' if n > 1 else ''})" for n in counts)
        rows.append((f"int8 products, {'vpdpbusd' if vnni else 'vpmaddwd'} {bits}-bit (GOPS)", ops))
    return tuple(rows)
