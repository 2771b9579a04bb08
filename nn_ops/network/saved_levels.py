"""A ``.lwx`` holding one network built for several CPU levels; ``lw.load`` takes the first this CPU runs.

``exe.save("model.lwx", levels=["llvm -mcpu=x86-64-v3"])`` writes a zip whose meta.json lists the levels
(their targets, most capable first) and whose members ``level<k>.lwx`` are each the ``.lwx`` that level
alone would be (kernels, runner, weights packed for its vector width).  Loading verifies the outer
archive like any other, picks the first level whose features this CPU has (``saved_target``'s
``runs_here``) and loads that member as a plain executable; a CPU that runs none gets an error
naming every level.  Each level must run on the machine that saves it (its objects are JIT code
for this process's architecture); for other CPUs, ``export_library(levels=...)`` cross-compiles.
"""
from __future__ import annotations

import io
from typing import Sequence, Tuple

from ...errors import ArgumentError
from ...target import saved_target
from .archive import ArchiveReader, ArchiveWriter, MetaChecker
from .export_levels import check_one_network, level_order

FORMAT = "loopweave-levels"
VERSION = 1


def save_levels(builds: Sequence, path) -> None:
    """Write ``builds`` (executables of one network for distinct CPU targets) as one ``.lwx``."""
    check_one_network(builds, "save")
    levels = []
    with ArchiveWriter(path) as archive:
        for k, build in enumerate(level_order(builds)):
            buf = io.BytesIO()
            build.save(buf)
            member = f"level{k}.lwx"
            archive.add(member, buf.getvalue())
            levels.append({"file": member, "target": {"cpu": build.target.cpu, "features": build.target.features}})
        archive.finish({"format": FORMAT, "version": VERSION, "levels": levels})


def chosen_level(reader: ArchiveReader) -> Tuple[bytes, str]:
    """The bytes of the first level of an opened levels archive that this CPU runs, and a name for it."""
    meta, where, check = reader.meta, reader.where, MetaChecker(reader.where)
    if meta.get("version") != VERSION:
        raise ArgumentError(f"{where}: unsupported levels archive version {meta.get('version')!r} (this loopweave "
                            f"reads version {VERSION})")
    names = []
    for entry in check.get(meta, "levels", list):
        saved = check.get(entry, "target", dict, "levels.")
        target = saved_target(check.get(saved, "cpu", str, "levels.target."),
                              check.get(saved, "features", str, "levels.target."))
        if target.runs_here():
            member = check.get(entry, "file", str, "levels.")
            return reader.read(member), f"{where} ({member}, cpu {target.cpu})"
        names.append(target.cpu)
    raise ArgumentError(f"{where} holds builds for {', '.join(names) or 'no CPU'}, none of which this machine runs; "
                        f"compile the model again here")
