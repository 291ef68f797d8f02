"""Model importers: a model file -> a graph IRModule and its params.

mod, params = tessera.frontend.from_onnx(onnx.load("model.onnx"), {"data": (1, 3, 224, 224)})
"""

from tessera.frontend.darknet import from_darknet
from tessera.frontend.onnx import UnsupportedOpError, from_onnx
from tessera.frontend.tflite import from_tflite

__all__ = ["UnsupportedOpError", "from_darknet", "from_onnx", "from_tflite"]
