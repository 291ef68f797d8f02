"""Model importers: a model file -> a graph IRModule and its params.

mod, params = tessera.frontend.from_onnx(onnx.load("model.onnx"), {"data": (1, 3, 224, 224)})
"""

from tessera.frontend.darknet import from_darknet
from tessera.frontend.keras import from_keras
from tessera.frontend.onnx import UnsupportedOpError, from_onnx
from tessera.frontend.pytorch import from_pytorch
from tessera.frontend.tflite import from_tflite

__all__ = [
    "UnsupportedOpError",
    "from_darknet",
    "from_keras",
    "from_onnx",
    "from_pytorch",
    "from_tflite",
]
