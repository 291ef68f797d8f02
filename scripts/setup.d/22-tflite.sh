#!/usr/bin/env bash
# The TFLite frontend and the detection helpers: the `tflite` flatbuffer classes and Pillow
# (tessera[tflite,vision]), the TFLite interpreter that tests compare with (ai-edge-litert), and
# the wheels whose bundled .tflite models the tests convert: mediapipe (float face, hand and
# pose models) and pymicro-wakeword (int8 streaming wake-word models). Both are installed
# without their dependencies: the tests only read their model files, never import them.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
if ! $PY -c "import tflite, PIL, ai_edge_litert" >/dev/null 2>&1; then
    $PY -m pip install -q 'tflite>=2.10' 'flatbuffers>=2' 'Pillow>=9' 'ai-edge-litert>=1.0'
fi
if ! $PY -c "import importlib.metadata as m; m.distribution('mediapipe')" >/dev/null 2>&1; then
    $PY -m pip install -q --no-deps 'mediapipe==0.10.14' || echo "mediapipe models unavailable: the slow TFLite model tests will skip" >&2
fi
if ! $PY -c "import importlib.metadata as m; m.distribution('pymicro-wakeword')" >/dev/null 2>&1; then
    $PY -m pip install -q --no-deps 'pymicro-wakeword==2.5.0' || echo "wake-word models unavailable: their TFLite tests will skip" >&2
fi
