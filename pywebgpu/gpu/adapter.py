"""What a device is asked for and what its adapter offers: features, limits, a summary."""

from __future__ import annotations

from dataclasses import dataclass, field

# Features a kernel may specialise on, under their WebGPU-spec names.
OPTIONAL_FEATURES = ("shader-f16", "subgroups", "timestamp-query")

# Limits requested at the adapter's real values, since large buffers exceed WebGPU's
# small defaults (128 MiB per storage binding).
REQUESTED_LIMITS = (
    "maxStorageBufferBindingSize",
    "maxBufferSize",
    "maxComputeWorkgroupStorageSize",
    "maxComputeInvocationsPerWorkgroup",
    "maxComputeWorkgroupSizeX",
    "maxStorageBuffersPerShaderStage",
)


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
