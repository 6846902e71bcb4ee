#!/usr/bin/env bash
# The main job: install what is missing, build the web bundle and serve the demo on
# 127.0.0.1 (with --headless, or no display: run it once in headless Chromium).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec .venv/bin/python -m devtools.main "$@"
