"""What a CPU core does per cycle and holds, by LLVM CPU name, and this machine's caches: the facts
decisions read (``target_info`` prints them; ``nn_ops`` decides from them: Winograd's map range).

fp32 FLOP per cycle and core at each vector width (Zen 4 runs a 512-bit FMA as two 256-bit halves, Zen
5 and Intel's server cores at full width, client Ice/Rocket Lake with one 512-bit pipe), L1d/L2/L3.
The host's caches come from Linux sysfs; another CPU's from ``CPU_CORES``; a CPU the table does not
know has them "not known" (None).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

from ...target import Target, native_target

_K, _M = 1024, 1 << 20

_SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class CoreFacts:
    """What one core of a CPU model does per cycle and holds: fp32 FLOP per cycle at each vector width
    (two FMA pipes of 256 bits: 32 at 256), and its data caches (L1d and L2 per core, L3 shared)."""
    flops: Dict[int, int]
    caches: Tuple[Tuple[str, int], ...]

    def fma_instructions(self, bits: int) -> Optional[float]:
        """Vector FMA instructions one core issues per cycle at ``bits`` (its FLOP rate over the FLOP
        of one instruction), None where the table has no rate at that width."""
        return fma_instructions(self.flops.get(bits), bits)

    def cache(self, level: str) -> Optional[int]:
        return dict(self.caches).get(level)


def fma_instructions(flops_per_cycle: Optional[int], bits: int) -> Optional[float]:
    """FMA instructions per cycle at ``bits`` from fp32 FLOP per cycle: each does 2 FLOP per lane."""
    return None if flops_per_cycle is None else flops_per_cycle / (2 * (bits // 32))


def _core(flops, l1d, l2, l3=None) -> CoreFacts:
    return CoreFacts(flops, (("L1d", l1d), ("L2", l2)) + ((("L3", l3),) if l3 else ()))


_SKX = _core({128: 16, 256: 32, 512: 64}, 32 * _K, 1 * _M)
_ICL_CLIENT = _core({128: 16, 256: 32, 512: 32}, 48 * _K, 512 * _K)
#: facts of the CPU models loopweave knows by LLVM name (vendors' optimisation manuals); the server parts'
#: figures where a model has several (Xeon Gold/Platinum: two 512-bit FMA pipes)
CPU_CORES: Dict[str, CoreFacts] = {
    "haswell": _core({128: 16, 256: 32}, 32 * _K, 256 * _K), "broadwell": _core({128: 16, 256: 32}, 32 * _K, 256 * _K),
    "skylake": _core({128: 16, 256: 32}, 32 * _K, 256 * _K), "alderlake": _core({128: 16, 256: 32}, 48 * _K, 1280 * _K),
    "skylake-avx512": _SKX, "cascadelake": _SKX, "cooperlake": _SKX,
    "icelake-client": _ICL_CLIENT, "tigerlake": _ICL_CLIENT, "rocketlake": _ICL_CLIENT,
    "icelake-server": _core({128: 16, 256: 32, 512: 64}, 48 * _K, 1280 * _K),
    "sapphirerapids": _core({128: 16, 256: 32, 512: 64}, 48 * _K, 2 * _M),
    "znver1": _core({128: 16, 256: 16}, 32 * _K, 512 * _K, 8 * _M),
    "znver2": _core({128: 16, 256: 32}, 32 * _K, 512 * _K, 16 * _M),
    "znver3": _core({128: 16, 256: 32}, 32 * _K, 512 * _K, 32 * _M),
    "znver4": _core({128: 16, 256: 32, 512: 32}, 32 * _K, 1 * _M, 32 * _M),
    "znver5": _core({128: 16, 256: 32, 512: 64}, 48 * _K, 1 * _M, 32 * _M),
    "neoverse-n1": _core({128: 16}, 64 * _K, 1 * _M), "neoverse-n2": _core({128: 16}, 64 * _K, 1 * _M),
    "neoverse-v1": _core({128: 32}, 64 * _K, 1 * _M), "apple-m1": _core({128: 32}, 128 * _K, 12 * _M),
}


def host_caches() -> Optional[Tuple[Tuple[str, int], ...]]:
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




@dataclass(frozen=True)
class CoreSummary:
    """The facts of the core a target's code runs on: ``core`` (the CPU model, "" where not known),
    fp32 FLOP per cycle with the target's vectors and at the core's widest, its caches."""
    core: str
    flops_per_cycle: Optional[int]
    full_width_flops: Optional[int]
    caches: Optional[Tuple[Tuple[str, int], ...]]
    vector_bits: int

    @property
    def fma_instructions_per_cycle(self) -> Optional[float]:
        """Vector FMA instructions a core issues per cycle with the target's vectors (None: not known)."""
        return fma_instructions(self.flops_per_cycle, self.vector_bits)

    def cache(self, level: str) -> Optional[int]:
        """The size in bytes of cache ``level`` ("L1d", "L2", "L3"), None where not known."""
        return dict(self.caches).get(level) if self.caches else None


def core_facts(tgt: Target) -> CoreSummary:
    """The core described for ``tgt``: its CPU model where it names one the table knows, else (a level
    such as x86-64-v3) this machine's where the code runs here; the host's caches from sysfs."""
    core = native_target().cpu if tgt.cpu not in CPU_CORES and tgt.runs_here() else tgt.cpu
    facts = CPU_CORES.get(core)
    caches = host_caches() if tgt.runs_here() and core == native_target().cpu else None
    if caches is None and facts is not None:
        caches = facts.caches
    flops = widest = None
    if facts is not None:
        widths = [w for w in facts.flops if w <= tgt.vector_bits]
        flops = facts.flops[max(widths)] if widths else None
        widest = facts.flops[max(facts.flops)]
    return CoreSummary(core if facts is not None else "", flops, widest, caches, tgt.vector_bits)
