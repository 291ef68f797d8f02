#!/usr/bin/env bash
# Install Debian packages that are missing (dpkg -s says which), running `apt-get update` at most
# once per call. Usage: scripts/apt_install.sh PACKAGE... ; a no-op when all are installed.
# Needs root (CI and the development machines run as root); without it, says what to run.
set -euo pipefail
missing=()
for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "tessera setup: missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
