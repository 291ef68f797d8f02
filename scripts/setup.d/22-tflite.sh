#!/usr/bin/env bash
# The TFLite frontend and the detection helpers: the `tflite` flatbuffer classes and Pillow
# (tessera[tflite,vision]), the TFLite interpreter that tests compare with (ai-edge-litert), and
# the wheels whose bundled .tflite models the tests convert: mediapipe (float face, hand and
# pose models) and pymicro-wakeword (int8 streaming wake-word models). Those two are installed
# without their dependencies: the tests only read their model files, never import them.
# A part that cannot be installed is reported; the tests that need it skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python

have() { $PY -c "import importlib.metadata as m; m.distribution('$1')" >/dev/null 2>&1; }

install() {  # install [pip options] SPEC: once, and a failure is a warning
    local spec="${!#}"
    local name="${spec%%[<>=]*}"
    have "$name" && return 0
    $PY -m pip install -q "$@" || echo "setup.d/22-tflite: could not install $spec; its tests will skip" >&2
}

install 'tflite>=2.10'
install 'flatbuffers>=2'
install 'Pillow>=9'
install 'ai-edge-litert>=1.0'
install --no-deps 'mediapipe==0.10.14'
install --no-deps 'pymicro-wakeword==2.5.0'
