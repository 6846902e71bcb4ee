"""pywebgpu.gpu — one small Pythonic layer over WebGPU, in the browser and natively.

    device = await request_device()
    buf = device.create_buffer_with_data(array("f", [1, 2, 3, 4]), label="x")
    pipeline = await device.compute_pipeline(wgsl, label="double")
    group = device.bind_group(pipeline, [buf])
    rec = device.record(); rec.dispatch(pipeline, group, 1); device.submit(rec)
    data = await device.read_buffer(buf)

In Pyodide the backend is the page's `navigator.gpu`; in CPython it is wgpu-native.
The layer knows nothing of models.
"""

import sys

from .adapter import DEFAULT_LIMITS, LIMIT_CHOICES
from .buffers import STORAGE_USAGE, UNIFORM_USAGE, Buffer, BufferOwner, BufferUsage
from .device import Device
from .errors import DeviceLostError, GPUError, ShaderError
from .js_data import is_js_buffer
from .pipelines import BindGroup, Pipeline
from .recorder import Recorder, linear_grid
from .timer import GPUTimer

IN_BROWSER = sys.platform == "emscripten"


async def request_device(limits: str = "adapter") -> Device:
    """The best adapter's device, with its optional features and `limits`: "adapter" (its
    real limits) or "default" (only WebGPU's defaults, as a low-end adapter offers)."""
    if limits not in LIMIT_CHOICES:
        raise GPUError(f"request_device(limits={limits!r}): expected one of {', '.join(map(repr, LIMIT_CHOICES))}")
    if IN_BROWSER:
        from ._browser import request_device as request
    else:
        try:
            from ._native import request_device as request
        except ImportError as error:
            raise GPUError(
                "native WebGPU needs the 'wgpu' package: pip install 'pywebgpu[native]'"
            ) from error
    return await request(limits)


__all__ = [
    "DEFAULT_LIMITS",
    "STORAGE_USAGE",
    "UNIFORM_USAGE",
    "BindGroup",
    "Buffer",
    "BufferOwner",
    "BufferUsage",
    "Device",
    "DeviceLostError",
    "GPUError",
    "GPUTimer",
    "IN_BROWSER",
    "Pipeline",
    "Recorder",
    "ShaderError",
    "is_js_buffer",
    "linear_grid",
    "request_device",
]
