"""Headless Chromium with WebGPU, driven by Playwright (the Debian build, never a download)."""

from __future__ import annotations

import os

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
