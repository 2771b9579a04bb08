"""The op library: compute definitions plus a default schedule per target.

``nn_ops.matmul(A, B)`` etc. return tensors; ``nn_ops.schedule(outputs, target)``
returns a Schedule with each op's default schedule applied.
"""
from .matmul import batch_matmul, dense, matmul
from .registry import register_schedule, schedule

__all__ = ["matmul", "dense", "batch_matmul", "schedule", "register_schedule"]
