"""Kernels asked for during a compile-once walk and built together at its end.

Both compilers of symbolic sizes (``compile_once/builder.py`` and ``network/symbolic_compile.py``)
schedule every new kernel first and build them all in one ``build_many`` (the build workers run
them in parallel); until then a call holds a :class:`Pending` in place of its module.  A variant
may instead be :class:`Deferred`: built by the executable at the first binding that runs it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterable, List, Tuple

from ...backends import build as backend_build      # by module: a test counts the builds
from . import kernel_cache


@dataclasses.dataclass(frozen=True)
class Pending:
    """A kernel asked for, the ``index``-th job of the build at the end; ``dtype``: its output's."""
    index: int
    dtype: str = ""


def build_pending(jobs: List[tuple], kernels: Dict[str, object], target, checks,
                  cached: Callable[[str], bool]) -> Tuple[Dict[str, object], Callable]:
    """Build ``jobs`` in one ``build_many``; store each new kernel whose key ``cached`` accepts in the
    disk's polymorphic kernel cache.  Returns ``kernels`` with modules for the pending ones, and the
    function that turns a pending kernel (or a module) into its module, for the calls."""
    if not jobs:
        return kernels, lambda m: m
    modules = backend_build.build_many(jobs, target, checks=checks)
    for key, m in kernels.items():
        if isinstance(m, Pending) and cached(key):
            kernel_cache.store_polymorphic(key, target, modules[m.index])

    def real(m):
        return modules[m.index] if isinstance(m, Pending) else m
    return {key: real(m) for key, m in kernels.items()}, real


@dataclasses.dataclass(frozen=True, eq=False)
class Deferred:
    """A variant's kernel built at the first binding that runs it (``build_deferred``), not with the
    network: ``job()`` gives ``build_many``'s (schedule, arguments, name) (made then: its compute and
    schedule cost a third of a walk); once built it goes into the disk's polymorphic kernel cache under
    ``key`` where ``remember``.  A variant only runs faster than its call's general kernel, which serves
    every binding, so a network need not build it up front."""
    key: str
    name: str
    job: Callable[[], tuple]
    checks: object = None
    remember: bool = False


def build_deferred(deferred: Iterable[Deferred], target) -> Dict[int, object]:
    """Build ``deferred`` kernels in one ``build_many``: {id of each: its module}."""
    deferred = list(deferred)
    by_checks: Dict[object, List[Deferred]] = {}
    for d in deferred:
        by_checks.setdefault(d.checks, []).append(d)
    built = {}
    for checks, group in by_checks.items():
        modules = backend_build.build_many([d.job() for d in group], target, checks=checks)
        for d, module in zip(group, modules):
            if d.remember:
                kernel_cache.store_polymorphic(d.key, target, module)
            built[id(d)] = module
    return built
