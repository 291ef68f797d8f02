#!/usr/bin/env bash
# ARM Linux cross-compilation (issue 18): the aarch64 and armv7 (hard-float) GNU toolchains with
# their C libraries, which link exported libraries for those targets (tessera/codegen/cross.py),
# and QEMU user mode, which runs them here (tessera.cross.run_under_qemu, the tests).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/apt_install.sh gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf \
    libc6-dev-arm64-cross libc6-dev-armhf-cross qemu-user
