"""pywebgpu: run ExecuTorch .pte language models on WebGPU from Python."""

__version__ = "0.1.0"
