"""The graph IR and the op registry.

from tessera.graph import parse, run_function
f = parse("def main(%x: f32[4]) { %1 = nn.relu(%x) : f32[4]; return %1 }")
run_function(f, {"x": np.ones(4, "float32")})
"""

from tessera.graph.builder import GraphBuilder
from tessera.graph.interpreter import run_function, run_module
from tessera.graph.ir import Attrs, Call, Constant, Function, TensorData, TensorType, Value
from tessera.graph.op import Op, OpKind, get_op, list_ops, register_op
from tessera.graph.parser import parse, parse_function
from tessera.graph.printer import function_to_text
from tessera.ir.module import IRModule

__all__ = [
    "Attrs",
    "Call",
    "Constant",
    "Function",
    "GraphBuilder",
    "IRModule",
    "Op",
    "OpKind",
    "TensorData",
    "TensorType",
    "Value",
    "function_to_text",
    "get_op",
    "list_ops",
    "parse",
    "parse_function",
    "register_op",
    "run_function",
    "run_module",
]
