#!/usr/bin/env bash
# The TFLite frontend and the detection helpers: the `tflite` flatbuffer classes and Pillow
# (tessera[tflite,vision]), the TFLite interpreter that tests compare with (ai-edge-litert), and
# the mediapipe wheel whose bundled .tflite models the slow tests convert. mediapipe is
# installed without its dependencies: the tests only read its model files, never import it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
if ! $PY -c "import tflite, PIL, ai_edge_litert" >/dev/null 2>&1; then
    $PY -m pip install -q 'tflite>=2.10' 'flatbuffers>=2' 'Pillow>=9' 'ai-edge-litert>=1.0'
fi
if ! $PY -c "import importlib.metadata as m; m.distribution('mediapipe')" >/dev/null 2>&1; then
    $PY -m pip install -q --no-deps 'mediapipe==0.10.14' || echo "mediapipe models unavailable: the slow TFLite model tests will skip" >&2
fi
