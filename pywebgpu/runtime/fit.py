"""Whether a graph's buffers fit the device, asked before any weight is uploaded."""

from __future__ import annotations

from ..gpu import GPUError
from .constants import upload_bytes


class ModelTooLargeError(GPUError):
    """A graph needs a storage buffer larger than the device can bind."""


def check_fit(device, uploaded, split, slots, scratch_bytes: int):
    """Refuse a graph one of whose storage buffers (the constants `uploaded` whole, the
    activation `slots` (size, tensor ids), the scratch) exceeds the device's
    maxStorageBufferBindingSize or maxBufferSize, naming the bytes needed, the limit
    offered, and the bytes of all the buffers (with the constants its ops store `split`
    across buffers within the limits)."""
    buffers = [(f"constant {t.label}", upload_bytes(t)) for t in uploaded]
    buffers += [(f"activations{slot}", size) for slot, (size, _) in enumerate(slots)]
    buffers.append(("scratch", scratch_bytes))
    limit, name = min(
        (device.limits["maxStorageBufferBindingSize"], "maxStorageBufferBindingSize"),
        (device.limits["maxBufferSize"], "maxBufferSize"),
    )
    label, size = max(buffers, key=lambda b: b[1])
    if size > limit:
        total = sum(b[1] for b in buffers) + sum(upload_bytes(t) for t in split)
        raise ModelTooLargeError(
            f"this model does not fit this adapter ({device.adapter.description}): {label} needs "
            f"{size:,} bytes in one buffer, above the adapter's {name} of {limit:,} "
            f"(the model's buffers take {total:,} bytes in all)"
        )
