"""``warn_symbolic_annotations(schedule)``: a ``ScheduleWarning`` for each ``vectorize`` or ``unroll``
that lowering cannot honour because the axis has a symbolic extent.

A stage computed at the root keeps its axes' extents through bound inference, so an annotated leaf
axis of symbolic extent there stays a serial loop (``vectorize`` needs a constant lane count,
``unroll`` a constant trip count to copy the body).  The warning names the stage, the axis and the
split that makes a constant inner axis.  A stage attached elsewhere (``compute_at``) is left alone:
bound inference may give its axes constant extents in the main part of the loop it sits in.
"""
from __future__ import annotations

import warnings

from ..dsl.expr import Const
from ..errors import ScheduleWarning

#: what each annotation needs, and the split factor the warning suggests
_NEEDS = {"vectorize": ("a vector's lane count", 8), "unroll": ("copying the body per iteration", 4)}


def warn_symbolic_annotations(schedule) -> None:
    for stage in schedule.stages:
        if stage.attach_type != "root":
            continue
        for ivar, kind in stage.annotations.items():
            if kind not in _NEEDS or isinstance(ivar.extent, Const):
                continue
            what, factor = _NEEDS[kind]
            name = stage.name if stage.name.isidentifier() else "T"
            axis = ivar.name if ivar.name.isidentifier() else "axis"
            warnings.warn(f"{kind}: axis '{ivar.name}' of stage '{stage.name}' has the symbolic extent {ivar.extent}, "
                          f"so it stays a serial loop ({what} needs a constant extent); split it by a constant and "
                          f"{kind} the inner axis: o, i = s[{name}].split({axis}, factor={factor}); "
                          f"s[{name}].{kind}(i)", ScheduleWarning, stacklevel=4)
