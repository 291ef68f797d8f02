#!/usr/bin/env bash
# Debian's chromium, so that the HTML graph view's browser test (tests/cli/test_html.py) renders
# the page in a real headless browser instead of being skipped. A no-op when it is installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/apt_install.sh chromium
