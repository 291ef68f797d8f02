#!/usr/bin/env bash
# Create .venv (if missing) and install tessera with its development dependencies into it, then
# run each scripts/setup.d/*.sh in name order: one file per optional part (a frontend's Python
# packages, a toolchain from Debian, ...), so that parts are added without editing this file.
# Each part is idempotent and fast when what it installs is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e '.[dev]'
for part in scripts/setup.d/*.sh; do
    [ -e "$part" ] || continue
    bash "$part"
done
