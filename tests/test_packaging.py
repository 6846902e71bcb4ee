"""The wheel: one pure-Python py3-none-any wheel carrying the WGSL kernels (wgsl/ and its
subfolders) and the model download's chunk hasher (JS), no numpy, and none of the tools
beside the package (bench, devtools, tests, export_tools, the web demo)."""

import ast
import zipfile
from pathlib import Path

from devtools.bundle import ROOT, build_wheel


def test_wheel_is_pure_python_and_ships_the_kernels(tmp_path):
    wheel = build_wheel(tmp_path)
    assert wheel.name.endswith("-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    kernels = sorted(p.relative_to(ROOT / "wgsl").as_posix() for p in (ROOT / "wgsl").rglob("*.wgsl"))
    assert kernels, "no kernels in wgsl/"
    for kernel in kernels:
        assert f"pywebgpu/wgsl/{kernel}" in names
    assert not [n for n in names if n.split("/")[0] in ("bench", "devtools", "tests", "e2e_tests", "export_tools", "web")]
    assert "pywebgpu/llm/chunk_hasher.js" in names
    assert "pywebgpu/llm/checked_read.mjs" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    runtime_requirements = [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert [r.split(">")[0].split("=")[0] for r in runtime_requirements] == ["flatbuffers"]


def test_runtime_never_imports_numpy():
    for path in (ROOT / "pywebgpu").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            assert not any(m.split(".")[0] in {"numpy", "torch"} for m in modules), f"{path}: imports {modules}"
