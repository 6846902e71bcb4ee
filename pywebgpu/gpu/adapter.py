"""What a device is asked for and what its adapter offers: features, limits, a summary."""

from __future__ import annotations

from dataclasses import dataclass, field

# Features a kernel may specialise on, under their WebGPU-spec names.
OPTIONAL_FEATURES = ("shader-f16", "subgroups", "timestamp-query")

# WebGPU's default limits (the spec's values), which every adapter offers: those kernels
# depend on, requested as they are with `request_device(limits="default")`.
DEFAULT_LIMITS = {
    "maxStorageBufferBindingSize": 128 * 1024 * 1024,
    "maxBufferSize": 256 * 1024 * 1024,
    "maxComputeWorkgroupStorageSize": 16 * 1024,
    "maxComputeInvocationsPerWorkgroup": 256,
    "maxComputeWorkgroupSizeX": 256,
    "maxComputeWorkgroupSizeY": 256,
    "maxComputeWorkgroupSizeZ": 64,
    "maxComputeWorkgroupsPerDimension": 65535,
    "maxStorageBuffersPerShaderStage": 8,
    "maxUniformBuffersPerShaderStage": 12,
    "maxUniformBufferBindingSize": 64 * 1024,
}

# The limits a device asks for and reports, by default at the adapter's real values, since
# large buffers exceed WebGPU's small defaults (128 MiB per storage binding).
REQUESTED_LIMITS = tuple(DEFAULT_LIMITS)

# request_device's choices of limits.
LIMIT_CHOICES = ("adapter", "default")


def requested_limits(adapter_limits, choice: str) -> dict:
    """REQUESTED_LIMITS' values to request for `choice` (one of LIMIT_CHOICES): the
    adapter's (`adapter_limits[name]`), or WebGPU's defaults."""
    if choice == "default":
        return dict(DEFAULT_LIMITS)
    return {name: adapter_limits[name] for name in REQUESTED_LIMITS}
def normalize_feature(name: str) -> str:
    """A backend's feature name under its WebGPU-spec name (wgpu-native says "subgroup")."""
    return "subgroups" if name == "subgroup" else name


@dataclass
class AdapterSummary:
    """The adapter behind a device: its backend, a readable name, what it offers."""

    backend: str  # "browser" or "native"
    description: str
    features: frozenset = field(default_factory=frozenset)
    limits: dict = field(default_factory=dict)
    is_fallback: bool = False
