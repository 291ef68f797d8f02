"""FunctionInfo: what the runtime knows of a compiled kernel — its name and its parameters.

It travels as JSON inside an exported library, so it holds only plain values:

    FunctionInfo("myadd",
                 params=[ParamInfo("A", "buffer", "float32", ["n"]), ...,
                         ParamInfo("C", "buffer", "float32", ["n"], written=True)],
                 vars=[VarInfo("n", "int32")])

A buffer's shape holds ints and the names of symbolic variables (or, for a dimension that is an
expression such as `n + 1`, its text; the runtime does not check those dimensions).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class ParamInfo:
    name: str
    kind: str  # "buffer" or "var"
    dtype: str
    shape: list = field(default_factory=list)  # buffers only: int | str per dimension
    written: bool = False  # buffers only: the kernel stores into it (a read-only array is refused)
    workspace: bool = False  # buffers only: scratch memory the caller provides (lift_workspaces)


@dataclass
class VarInfo:
    name: str
    dtype: str


@dataclass
class FunctionInfo:
    name: str
    params: list[ParamInfo]
    vars: list[VarInfo]

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> FunctionInfo:
        return FunctionInfo(
            d["name"],
            [ParamInfo(**p) for p in d["params"]],
            [VarInfo(**v) for v in d["vars"]],
        )


def dumps(infos: list[FunctionInfo], extra: dict | None = None) -> str:
    return json.dumps({"functions": [i.to_json() for i in infos], **(extra or {})})


def loads(text: str) -> tuple[list[FunctionInfo], dict]:
    d = json.loads(text)
    infos = [FunctionInfo.from_json(f) for f in d.pop("functions")]
    return infos, d
