"""The offline web bundle under web/vendor/: Pyodide, PyScript and wheels (fetched by
scripts/setup.sh; micropip where Pyodide's lock names it), plus the freshly built pywebgpu
wheel and a manifest of wheel names."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
VENDOR = WEB / "vendor"
WHEELS = VENDOR / "wheels"
PYODIDE_LOCK = VENDOR / "pyodide" / "pyodide-lock.json"


def _single_wheel(name: str) -> str:
    found = sorted(WHEELS.glob(f"{name}-*.whl"))
    if len(found) != 1:
        raise RuntimeError(f"expected one {name} wheel in {WHEELS}, found {len(found)}: run scripts/setup.sh")
    return found[0].name


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock_wheel(wheel: Path) -> None:
    """Point the pyodide-lock.json entry naming `wheel`'s file at this file's sha256."""
    lock = json.loads(PYODIDE_LOCK.read_text())
    entries = [e for e in lock["packages"].values() if e["file_name"] == wheel.name]
    if len(entries) != 1:
        raise RuntimeError(f"{PYODIDE_LOCK} has {len(entries)} entries for {wheel.name}, expected one")
    entries[0]["sha256"] = _sha256(wheel)
    PYODIDE_LOCK.write_text(json.dumps(lock))


def _check_micropip_locked() -> None:
    entry = json.loads(PYODIDE_LOCK.read_text())["packages"]["micropip"]
    wheel = PYODIDE_LOCK.parent / entry["file_name"]
    if not wheel.is_file() or _sha256(wheel) != entry["sha256"]:
        raise RuntimeError(f"{wheel} is missing or not the file {PYODIDE_LOCK.name} names: run scripts/setup.sh")


def build_wheel(outdir: Path) -> Path:
    """Build the pywebgpu wheel from the source tree into `outdir`; returns its path. The
    new wheel replaces the old in one rename, so a server never finds the folder without."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=outdir, prefix=".build-") as staging:
        build = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", staging, str(ROOT)],
            capture_output=True,
            text=True,
        )
        if build.returncode:
            raise RuntimeError(f"building the pywebgpu wheel failed:\n{build.stdout}{build.stderr}")
        (built,) = Path(staging).glob("pywebgpu-*.whl")
        wheel = outdir / built.name
        os.replace(built, wheel)
    for old in outdir.glob("pywebgpu-*.whl"):
        if old != wheel:
            old.unlink()
    return wheel


def build_web_bundle() -> Path:
    """Build the pywebgpu wheel into web/vendor/wheels and write wheels.json, and copy the
    wheel's checked download and its chunk hasher (the chat page's model download runs them
    too) to web/vendor/; returns the wheel."""
    if not (VENDOR / "pyodide" / "pyodide.mjs").is_file():
        raise RuntimeError(f"Pyodide is missing from {VENDOR}: run scripts/setup.sh")
    _check_micropip_locked()
    build_wheel(WHEELS)
    shutil.copyfile(ROOT / "pywebgpu" / "llm" / "checked_read.mjs", VENDOR / "checked-read.mjs")
    shutil.copyfile(ROOT / "pywebgpu" / "llm" / "chunk_hasher.js", VENDOR / "chunk-hasher.js")
    manifest = {name: _single_wheel(name) for name in ("flatbuffers", "pywebgpu")}
    (WHEELS / "wheels.json").write_text(json.dumps(manifest, indent=2))
    return WHEELS / manifest["pywebgpu"]


if __name__ == "__main__":
    # scripts/setup.sh: `python -m devtools.bundle lock-wheel WHEEL`.
    command, wheel_path = sys.argv[1:]
    if command != "lock-wheel":
        sys.exit(f"unknown command {command!r}: the one command is lock-wheel WHEEL")
    lock_wheel(Path(wheel_path))
