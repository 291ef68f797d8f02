"""`tessera.nd`: make arrays (TVM's `tvm.nd`).

nd.array(np.ones(4, "float32"))       nd.array([1, 2], dtype="bfloat16")
nd.empty((2, 3), "float32", cpu(0))
"""

from tessera.runtime.ndarray import NDArray, array, empty

__all__ = ["NDArray", "array", "empty"]
