"""The errors the GPU layer raises; each message names the kernel or buffer involved."""


class GPUError(Exception):
    """A WebGPU operation failed; the message names the kernel or buffer involved."""


class ShaderError(GPUError):
    """A WGSL kernel failed to compile or its pipeline failed to build."""


class DeviceLostError(GPUError):
    """The GPU device is gone (driver reset, tab in background too long, out of memory)."""
