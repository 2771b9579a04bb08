"""What a machine is: the target that code is generated for.

Imports nothing of the project (but the error type it raises).  ``Target("llvm")``
describes the host CPU: its LLVM name *and* its feature string (a VM may hide features
the name implies, so both are needed, and both key the compile cache), its vector width
and thread count.

Another CPU is named by a target string (cross-compilation)::

    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"   # an Arm server
    "llvm -mcpu=x86-64-v2"                               # x86-64 without AVX (SSE4.2)
    "llvm -mcpu=haswell -mattr=-fma"                     # AVX2, FMA turned off

Its feature string is explicit and complete where loopweave can make it so (x86: every
feature LLVM knows on this host, each ``+`` or ``-``), so the code uses exactly the
features of the named CPU or level, and ``runs_here()`` can tell whether this machine can
run it.  Code for a target that cannot run here is compiled position-independent for
``export_library`` and refuses to run.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, FrozenSet, Optional


@dataclass(frozen=True)
class Target:
    kind: str
    cpu: str = ""
    features: str = ""
    vector_bits: int = 256
    num_threads: int = 1
    # GPU limits (target "cuda"): checked when a kernel is lowered, before any code exists
    max_threads_per_block: int = 1024
    max_shared_memory_per_block: int = 48 * 1024   # static __shared__ limit without opt-in
    # LLVM target triple; "" is this process's own (the host's)
    triple: str = ""
    # target "cuda": the float32 arithmetic matmuls and convolutions may use; "tf32" or "fp16" lets them
    # run on the tensor cores (inputs rounded to 10 mantissa bits, fp32 accumulation), "fp32" keeps them exact
    precision: str = "fp32"

    @property
    def has_fma(self) -> bool:
        return "+fma" in self.features.split(",") or self.arch == "aarch64"   # every AArch64 CPU has fmla

    @property
    def arch(self) -> str:
        """``x86_64`` or ``aarch64`` (or the triple's first word), from the triple or the host."""
        return _arch_of(self.triple or _process_triple())

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 (zmm0-31; AVX2 code reaches only ymm0-15,
        even on an AVX-512 CPU) and on AArch64 (v0-v31), else 16.  Register tiles are sized by it
        (a GPU target: 32, the bound the CPU's tile shapes were made for; its own limits are per thread)."""
        if self.kind == "llvm" and self.arch == "x86_64":
            return 32 if "avx512f" in self.enabled_features() else 16
        return 32

    def enabled_features(self) -> FrozenSet[str]:
        return frozenset(f[1:] for f in self.features.split(",") if f.startswith("+"))

    def runs_here(self) -> bool:
        """Whether this machine can run code built for this target: same architecture and OS, and
        every feature the target enables is one this CPU has (always true of the host target)."""
        if self.kind != "llvm":
            return False
        host = host_target()
        if self == host or (self.cpu, self.features) == (host.cpu, host.features) and not self.triple:
            return True
        if self.arch != host.arch or (self.triple and "linux" not in self.triple):
            return False
        return self.enabled_features() <= host.enabled_features()

    def lanes(self, dtype: str) -> int:
        """How many elements of ``dtype`` fill one vector register."""
        import numpy as np
        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    def key(self) -> str:
        return f"{self.kind}|{self.cpu}|{self.features}" + (f"|{self.triple}" if self.triple else "") \
            + (f"|{self.precision}" if self.precision != "fp32" else "")

    def __str__(self) -> str:
        if self.kind == "llvm":
            where = f"{self.triple}, " if self.triple else ""
            return f"llvm ({where}cpu={self.cpu}, {self.vector_bits}-bit vectors, {self.num_threads} threads)"
        if self.kind == "cuda":
            extra = f", {self.precision} matmuls" if self.precision != "fp32" else ""
            return f"cuda ({self.cpu or 'arch of the GPU present, else sm_90'}{extra})"
        return self.kind


HOST_TARGET_VARIABLE = "LOOPWEAVE_HOST_TARGET"


@lru_cache(maxsize=None)
def host_target() -> Target:
    """The CPU that ``"llvm"`` means: this machine's, or the one ``LOOPWEAVE_HOST_TARGET`` names.

    The variable holds a target string this machine can run (``"llvm -mcpu=x86-64-v3"`` on an
    AVX-512 machine), and then loopweave behaves as on a CPU of that kind: its vector width drives
    the default schedules, its features the generated code, and code for a wider CPU does not run
    (``runs_here``).  It lets one machine test what the suite does on another x86 level."""
    native = native_target()
    text = os.environ.get(HOST_TARGET_VARIABLE, "").strip()
    if not text:
        return native
    from .errors import BuildError
    if text.split()[:1] != ["llvm"]:
        raise BuildError(f"{HOST_TARGET_VARIABLE}={text!r}: give an LLVM CPU target such as "
                         f"'llvm -mcpu=x86-64-v3', or unset it to use this machine's CPU")
    try:
        forced = _parse_target_against(" ".join(text.split()), native)
    except BuildError as exc:
        raise BuildError(f"{HOST_TARGET_VARIABLE}: {exc}") from None
    if forced.triple or not forced.enabled_features() <= native.enabled_features():
        missing = sorted(forced.enabled_features() - native.enabled_features())
        raise BuildError(f"{HOST_TARGET_VARIABLE}={text!r}: this machine ({native.cpu}) cannot run code for it"
                         + (f" (it lacks {', '.join(missing)})" if missing else " (it names another triple)")
                         + "; name a CPU level this machine reaches, e.g. 'llvm -mcpu=x86-64-v3', or unset it")
    return forced


@lru_cache(maxsize=None)
def native_target() -> Target:
    """This machine's own CPU, whatever ``LOOPWEAVE_HOST_TARGET`` says."""
    from llvmlite import binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    enabled = set(f[1:] for f in features.split(",") if f.startswith("+"))
    return Target("llvm", cpu, features, _vector_bits(_arch_of(llvm.get_process_triple()), enabled), _threads())


def _threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _vector_bits(arch: str, enabled) -> int:
    """The widest vectors the CPU runs natively (LLVM honours explicit 512-bit vector types);
    AArch64: 128-bit NEON (loopweave emits fixed-width vectors, never SVE's scalable ones)."""
    if arch != "x86_64":
        return 128
    return 512 if "avx512f" in enabled else 256 if ("avx2" in enabled or "avx" in enabled) else 128


@lru_cache(maxsize=None)
def _process_triple() -> str:
    from llvmlite import binding as llvm
    return llvm.get_process_triple()


def _arch_of(triple: str) -> str:
    arch = triple.split("-")[0].lower()
    return {"amd64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


# x86-64 CPUs by the features loopweave lets LLVM use: the psABI levels, and CPU names mapped to
# the level they reach (the name still tunes LLVM's instruction scheduling).  Each set is closed
# under LLVM's implications (avx2 -> avx -> sse4.2 -> ...), so "+ these, - every other" is exact.
_X86_BASE = frozenset("64bit cmov cx8 fxsr mmx sse sse2".split())
_X86_V2 = _X86_BASE | frozenset("cx16 sahf popcnt sse3 sse4.1 sse4.2 ssse3 crc32".split())
_X86_V3 = _X86_V2 | frozenset("avx avx2 bmi bmi2 f16c fma lzcnt movbe xsave".split())
_X86_V4 = _X86_V3 | frozenset("avx512f avx512bw avx512cd avx512dq avx512vl".split())
# The vector extensions named CPUs add to their level (the ones code generation can use: dot products
# for int8 (VNNI), bf16, byte permutes, carry-less and AES arithmetic in vectors), so code for a named
# CPU uses them whatever machine compiles it.
_X86_VECTOR_CRYPTO = frozenset("aes pclmul gfni vaes vpclmulqdq".split())
_X86_ICELAKE = _X86_V4 | _X86_VECTOR_CRYPTO | frozenset(
    "avx512vnni avx512vbmi avx512vbmi2 avx512bitalg avx512vpopcntdq avx512ifma".split())
_X86_ZEN4 = _X86_ICELAKE | {"avx512bf16"}
X86_CPUS: Dict[str, FrozenSet[str]] = {
    "x86-64": _X86_BASE, "x86-64-v2": _X86_V2, "x86-64-v3": _X86_V3, "x86-64-v4": _X86_V4,
    "nehalem": _X86_V2, "westmere": _X86_V2,
    "sandybridge": _X86_V2 | {"avx", "xsave"}, "ivybridge": _X86_V2 | {"avx", "xsave", "f16c"},
    "haswell": _X86_V3, "broadwell": _X86_V3, "skylake": _X86_V3,
    "alderlake": _X86_V3 | _X86_VECTOR_CRYPTO | {"avxvnni"},
    "znver1": _X86_V3, "znver2": _X86_V3, "znver3": _X86_V3 | {"aes", "pclmul", "vaes", "vpclmulqdq"},
    "skylake-avx512": _X86_V4, "cascadelake": _X86_V4 | {"avx512vnni"}, "icelake-server": _X86_ICELAKE,
    "sapphirerapids": _X86_ICELAKE | {"avx512bf16", "avx512fp16", "avxvnni"},
    "znver4": _X86_ZEN4, "znver5": _X86_ZEN4 | {"avxvnni", "avx512vp2intersect"},
}
CROSS_ARCHS = ("x86_64", "aarch64")   # the thread pool's futex call is written for these (Linux)
_OPTIONS = ("mtriple", "mcpu", "mattr")

_compiling_for: ContextVar[Optional[Target]] = ContextVar("loopweave_compiling_for", default=None)


@contextmanager
def compiling_for(target: Target):
    """Inside, ``resolve_target("llvm")`` (the CPU code is made for) is ``target`` instead of the host.

    The network compiler enters it around a cross-compile, so that what is chosen from "the CPU's
    vector width" without a target at hand (conv2d's packed-weight blocks, the blocked layout's
    channel block) follows the target, like the schedules that are given it."""
    token = _compiling_for.set(target)
    try:
        yield target
    finally:
        _compiling_for.reset(token)


@lru_cache(maxsize=None)
def _llvm_knows_cpu(triple: str, cpu: str) -> bool:
    """Whether LLVM knows ``cpu`` for ``triple``.  LLVM takes an unknown name, warns on stderr
    ("is not a recognized processor ... (ignoring processor)") and tunes for nothing in
    particular, so a typo would silently give generic code: the warning is read here, from the
    process's stderr redirected for the one call that makes a target machine."""
    import sys
    import tempfile
    from llvmlite import binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    machine_target = llvm.Target.from_triple(triple)
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            machine_target.create_target_machine(cpu=cpu)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        warning = captured.read().decode(errors="replace")
    return "not a recognized processor" not in warning


def parse_target(text: str) -> Target:
    """The Target of ``"llvm -mtriple=... -mcpu=... -mattr=+a,-b"`` (each option optional)."""
    return _parse_target(" ".join(text.split()))


@lru_cache(maxsize=64)
def _parse_target(text: str) -> Target:
    return _parse_target_against(text, host_target())


def _parse_target_against(text: str, host: Target) -> Target:
    """``parse_target`` where ``host`` is the CPU that an unnamed or ``native`` CPU means."""
    from .errors import BuildError
    words = text.split()
    opts: Dict[str, str] = {}
    for word in words[1:]:
        name, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or not eq or name not in _OPTIONS or not value or name in opts:
            raise BuildError(f"target {text!r}: cannot read {word!r}; the options are -mtriple=<triple> "
                             f"(e.g. aarch64-linux-gnu), -mcpu=<cpu> (e.g. neoverse-n1, x86-64-v2, haswell) and "
                             f"-mattr=<+feature,-feature,...>, each at most once")
        opts[name] = value
    triple = opts.get("mtriple", "")
    arch = _arch_of(triple) if triple else host.arch
    if arch not in CROSS_ARCHS or (triple and "linux" not in triple):
        raise BuildError(f"target {text!r}: loopweave compiles for Linux on {' or '.join(CROSS_ARCHS)} "
                         f"(e.g. -mtriple=aarch64-linux-gnu), not {triple!r}")
    cpu = opts.get("mcpu", "")
    if arch == host.arch and cpu in ("", "native", host.cpu):
        cpu, features = host.cpu, host.features.split(",")
    elif arch == "x86_64":
        if not cpu:
            cpu = "x86-64"
        if cpu not in X86_CPUS:
            raise BuildError(f"target {text!r}: loopweave does not know which features x86 CPU {cpu!r} has; use "
                             f"an x86-64 level (x86-64, x86-64-v2, x86-64-v3, x86-64-v4) or one of "
                             f"{', '.join(sorted(set(X86_CPUS) - {'x86-64', 'x86-64-v2', 'x86-64-v3', 'x86-64-v4'}))}")
        wanted = X86_CPUS[cpu]
        # every feature LLVM knows on an x86 host, off unless the CPU has it, so LLVM uses exactly these
        known = sorted({f[1:] for f in host.features.split(",") if f[:1] in "+-"}) if host.arch == "x86_64" else []
        features = [f"-{f}" for f in known if f not in wanted] + [f"+{f}" for f in sorted(wanted)]
    else:   # aarch64: NEON (with FMA) on every CPU; the name tunes scheduling and may add features
        cpu = cpu or "generic"
        if not _llvm_knows_cpu(triple or "aarch64-linux-gnu", cpu):
            raise BuildError(f"target {text!r}: LLVM (through llvmlite) does not know the aarch64 CPU {cpu!r}; "
                             f"use an LLVM CPU name (e.g. neoverse-n1, neoverse-v1, neoverse-n2, cortex-a72, "
                             f"cortex-a76, apple-m1, ampere1) or generic")
        features = ["+neon"]
    for item in (opts["mattr"].split(",") if "mattr" in opts else []):
        if item[:1] not in "+-" or len(item) < 2:
            raise BuildError(f"target {text!r}: -mattr takes +feature or -feature items separated by commas, "
                             f"got {item!r}")
        features = [f for f in features if f[1:] != item[1:]] + [item]
    enabled = {f[1:] for f in features if f.startswith("+")}
    return Target("llvm", cpu, ",".join(features), _vector_bits(arch, enabled), host.num_threads, triple=triple)


def saved_target(cpu: str, features: str) -> Target:
    """The CPU target of code saved on some machine (a ``.lwx``): its CPU name and feature string as
    they were, on this machine's architecture, with this machine's threads.  ``runs_here()`` says
    whether this CPU can run it (its features a subset of this CPU's)."""
    host = host_target()
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    return Target("llvm", cpu, features, _vector_bits(host.arch, enabled), host.num_threads)


def resolve_target(target) -> Target:
    """A Target from a Target, ``"llvm"`` (the host CPU: inside ``compiling_for(t)``, ``t``),
    ``"llvm -mtriple=... -mcpu=... -mattr=..."`` (see ``parse_target``) or ``"cuda"``."""
    if isinstance(target, Target):
        return target
    if target in (None, "llvm", "cpu"):
        return _compiling_for.get() or host_target()
    if isinstance(target, str) and target.split()[:1] == ["llvm"]:
        return parse_target(target)
    if target == "cuda":
        return Target("cuda")   # cpu="" : compile for the GPU present (sm_90 when there is none)
    if isinstance(target, str) and target.startswith("cuda:sm_") and target[8:].isdigit():
        return Target("cuda", cpu=target[5:])
    from .errors import BuildError
    raise BuildError(f"unknown target {target!r}; use 'llvm' (the host CPU), 'llvm -mtriple=<triple> -mcpu=<cpu>' "
                     f"(another CPU), 'cuda' or 'cuda:sm_XX'")
