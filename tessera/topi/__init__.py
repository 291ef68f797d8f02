"""Tensor operators shared by the graph ops: te compute definitions and per-target schedules.

`generic` holds the schedules every target can use; op families live in their own modules.
"""

from tessera.topi import generic

__all__ = ["generic"]
