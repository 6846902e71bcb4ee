"""Headless Chromium with WebGPU, driven by Playwright (the Debian build, never a download)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import wire

CHROMIUM = os.environ.get("PYWEBGPU_CHROMIUM", "/usr/bin/chromium")

# SwiftShader gives WebGPU on a machine without a GPU; the rest keep Chromium from trying
# to reach the network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
    "--use-webgpu-adapter=swiftshader",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-first-run",
]


def launch_chromium(playwright, headless: bool = True):
    """Chromium with WebGPU; Playwright gives each launch a fresh temporary profile."""
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"Chromium not found at {CHROMIUM}: run scripts/setup.sh")
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        headless=headless,
        args=CHROMIUM_ARGS,
    )


class PythonPage:
    """Runs Python in a page that has booted Pyodide with pywebgpu (window.pyodideReady)."""

    def __init__(self, page):
        self.page = page
        self.load_module("_wire", Path(wire.__file__).read_text())

    def run(self, code: str) -> str | None:
        """Run `code` with top-level await; returns str() of its last expression."""
        return self.page.evaluate(
            """async (code) => {
                const pyodide = await window.pyodideReady;
                const result = await pyodide.runPythonAsync(code);
                return result === undefined ? null : String(result);
            }""",
            code,
        )

    def load_module(self, name: str, source: str):
        """Make `source` importable as `name` in the page."""
        self.run(
            f"import sys, types\n_m = types.ModuleType({name!r})\n"
            f"exec(compile({json.dumps(source)}, {name + '.py'!r}, 'exec'), _m.__dict__)\nsys.modules[{name!r}] = _m"
        )

    def call(self, module: str, function: str, *args):
        """`await module.function(*args)` in the page; JSON-able args and result, bytes allowed."""
        payload = json.dumps(wire.encode(list(args)))
        result = self.run(
            f"import json, _wire, {module}\n"
            f"json.dumps(_wire.encode(await {module}.{function}(*_wire.decode(json.loads({payload!r})))))"
        )
        return wire.decode(json.loads(result))
