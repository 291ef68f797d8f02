"""tessera.runtime: run compiled kernels with numpy alone (it imports nothing else from tessera).

    lib = tessera.runtime.load_module("x.so")
    lib["myadd"](nd.array(a), nd.array(b), c)

Devices and arrays (ndarray.py, nd.py), modules and calling (module.py, packed_func.py), the
native thread pool (native.py, native/tessera_rt.c), the function registry (registry.py),
timing (profiling.py), configuration from the environment (config.py).
"""

from tessera.runtime import artifact, nd
from tessera.runtime.config import num_threads
from tessera.runtime.function_info import FunctionInfo, ParamInfo, VarInfo
from tessera.runtime.graph_executor import GraphExecutorFactory
from tessera.runtime.graph_module import GraphModule
from tessera.runtime.module import Module, load_module
from tessera.runtime.native import get_num_threads, set_num_threads
from tessera.runtime.ndarray import Device, NDArray, cpu, cuda, device, opencl
from tessera.runtime.packed_func import PackedFunc
from tessera.runtime.profiling import ProfileResult
from tessera.runtime.registry import (
    get_global_func,
    list_global_func_names,
    register_func,
    remove_global_func,
)

__all__ = [
    "Device",
    "FunctionInfo",
    "GraphExecutorFactory",
    "GraphModule",
    "Module",
    "NDArray",
    "PackedFunc",
    "ParamInfo",
    "ProfileResult",
    "VarInfo",
    "artifact",
    "cpu",
    "cuda",
    "device",
    "get_global_func",
    "get_num_threads",
    "list_global_func_names",
    "load_module",
    "nd",
    "num_threads",
    "opencl",
    "register_func",
    "remove_global_func",
    "set_num_threads",
]
