"""What every code generator shares: the runtime description of a PrimFunc."""

from __future__ import annotations

from tessera.runtime.function_info import FunctionInfo, ParamInfo, VarInfo
from tessera.tir.buffer import Buffer
from tessera.tir.expr import IntImm, Var
from tessera.tir.function import PrimFunc


def _dim(d):
    if isinstance(d, IntImm):
        return d.value
    if isinstance(d, Var):
        return d.name
    return str(d)


def function_info(func: PrimFunc) -> FunctionInfo:
    """The FunctionInfo the runtime checks calls of `func` against (see tir/function.py)."""
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            shape = [_dim(d) for d in func.param_shape(p)]
            params.append(ParamInfo(p.name, "buffer", str(p.dtype), shape))
        else:
            params.append(ParamInfo(p.name, "var", str(p.dtype)))
    vars_ = [VarInfo(v.name, str(v.dtype)) for v in func.scalar_vars()]
    return FunctionInfo(func.name, params, vars_)
