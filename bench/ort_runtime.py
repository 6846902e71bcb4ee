"""onnxruntime-web for the benchmark's `ort-webgpu` side, fetched from npm into
web/vendor/onnxruntime-web/ on first use: only the WebGPU build's three files, not the
whole (large) package; a benchmark step, not part of scripts/setup.sh's bundle.

    .venv/bin/python -m bench.ort_runtime
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from pathlib import Path

from devtools.bundle import VENDOR

VERSION = "1.30.0"
FOLDER = VENDOR / "onnxruntime-web"
# The ES module with the WebGPU execution provider, and the wasm build it loads (JSPI-free).
FILES = ("ort.webgpu.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm")


def ensure_runtime() -> Path:
    """web/vendor/onnxruntime-web/, fetched with `npm pack` unless it holds VERSION."""
    version_file = FOLDER / ".version"
    if version_file.is_file() and version_file.read_text().strip() == VERSION and all((FOLDER / name).is_file() for name in FILES):
        return FOLDER
    print(f"fetching onnxruntime-web@{VERSION} from npm into {FOLDER}", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            packed = subprocess.run(["npm", "pack", "-q", f"onnxruntime-web@{VERSION}"], cwd=scratch, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as error:
            raise SystemExit(f"cannot fetch onnxruntime-web@{VERSION} with npm ({error}); the ort-webgpu side needs it in {FOLDER}") from None
        FOLDER.mkdir(parents=True, exist_ok=True)
        with tarfile.open(Path(scratch) / packed.stdout.strip().splitlines()[-1]) as archive:
            for name in FILES:
                (FOLDER / name).write_bytes(archive.extractfile(f"package/dist/{name}").read())
    version_file.write_text(VERSION + "\n")
    return FOLDER


if __name__ == "__main__":
    print(ensure_runtime())
