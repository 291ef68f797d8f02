"""Pass infrastructure (PassContext, instruments) and, later, the graph passes."""

from tessera.transform.pass_context import (
    PassContext,
    PassInstrument,
    PassTiming,
    PrintIR,
    run_passes,
)

__all__ = ["PassContext", "PassInstrument", "PassTiming", "PrintIR", "run_passes"]
