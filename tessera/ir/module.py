"""IRModule: a named collection of functions (graph functions or PrimFuncs)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IRModule:
    functions: dict[str, object] = field(default_factory=dict)

    def __getitem__(self, name: str):
        return self.functions[name]

    def __setitem__(self, name: str, func) -> None:
        self.functions[name] = func

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    def __iter__(self):
        return iter(self.functions.items())

    def __len__(self) -> int:
        return len(self.functions)

    def __str__(self) -> str:
        return "\n\n".join(str(f) for f in self.functions.values())
