"""The autoscheduler: fast schedules from the compute definition alone.

``tune(args, target, trials, ...)`` searches a sketch space of schedule decisions
(space.py) with an evolutionary search (search.py) ranked by a LightGBM cost model
(cost_model.py: one model for all tasks of a run, pre-trained, shipped) over task-independent
features of the lowered IR (features.py); candidates are built
and timed in spawned worker processes (measure.py) and logged as JSON Lines
(records.py).  ``apply_best(log, args, target)`` replays the best record.
``tune_tasks`` (task_scheduler.py) shares trials among several kernels; ``tune_network``
(network.py) tunes the kernels a network graph lists.
"""
from .cost_model import CostModel
from .records import RecordWarning
from .task import Task
from .network import NetworkTuneResult, tune_network
from .task_scheduler import tune_tasks
from .tune import TuneResult, apply_best, tune

__all__ = ["CostModel", "tune", "tune_tasks", "tune_network", "NetworkTuneResult", "apply_best", "TuneResult", "Task",
           "RecordWarning"]
