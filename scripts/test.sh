#!/usr/bin/env bash
# The whole test suite: native (wgpu) and browser (headless Chromium) tests.
# Extra arguments go to pytest, e.g. `scripts/test.sh -m native`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m pytest "$@"
