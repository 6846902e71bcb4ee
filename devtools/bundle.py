"""The offline web bundle under web/vendor/: Pyodide, PyScript and wheels (fetched by
scripts/setup.sh), plus the freshly built pywebgpu wheel and a manifest of wheel names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
VENDOR = WEB / "vendor"
WHEELS = VENDOR / "wheels"


def _single_wheel(name: str) -> str:
    found = sorted(WHEELS.glob(f"{name}-*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one {name} wheel in {WHEELS}, found {len(found)}: run scripts/setup.sh")
    return found[0].name


def build_wheel(outdir: Path) -> Path:
    """Build the pywebgpu wheel from the source tree into `outdir`; returns its path."""
    for old in Path(outdir).glob("pywebgpu-*.whl"):
        old.unlink()
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir), str(ROOT)],
        capture_output=True,
        text=True,
    )
    if build.returncode:
        raise RuntimeError(f"building the pywebgpu wheel failed:\n{build.stdout}{build.stderr}")
    (wheel,) = Path(outdir).glob("pywebgpu-*.whl")
    return wheel


def build_web_bundle() -> Path:
    """Build the pywebgpu wheel into web/vendor/wheels and write wheels.json, and copy the
    wheel's checked download and its chunk hasher (the chat page's model download runs them
    too) to web/vendor/; returns the wheel."""
    if not (VENDOR / "pyodide" / "pyodide.mjs").is_file():
        raise RuntimeError(f"Pyodide is missing from {VENDOR}: run scripts/setup.sh")
    build_wheel(WHEELS)
    shutil.copyfile(ROOT / "pywebgpu" / "llm" / "checked_read.mjs", VENDOR / "checked-read.mjs")
    shutil.copyfile(ROOT / "pywebgpu" / "llm" / "chunk_hasher.js", VENDOR / "chunk-hasher.js")
    manifest = {name: _single_wheel(name) for name in ("micropip", "flatbuffers", "pywebgpu")}
    (WHEELS / "wheels.json").write_text(json.dumps(manifest, indent=2))
    return WHEELS / manifest["pywebgpu"]
