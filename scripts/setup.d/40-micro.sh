#!/usr/bin/env bash
# Microcontroller part (docs/micro.md): the bare-metal Arm toolchain, newlib, and QEMU for the
# emulated Cortex-M boards that tessera.micro builds for and runs on. The instruction-count
# plugin is compiled on first use by tessera.micro (it needs only the host C compiler).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/apt_install.sh gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm
