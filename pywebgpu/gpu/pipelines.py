"""Compute pipelines, built once per source, entry point and override constants, and the
bind groups that give them buffers."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .buffers import Buffer
from .errors import GPUError


@dataclass(eq=False)
class Pipeline:
    handle: object
    bind_group_layout: object
    label: str


@dataclass(eq=False)
class BindGroup:
    handle: object
    label: str


class PipelineCache:
    """The pipelines a device has built or is building, keyed by (source, entry point,
    constants); `build` is the backend's async (wgsl, label, entry_point, constants) →
    (handle, bind group layout)."""

    def __init__(self, build):
        self._build = build
        # Keyed by the source text itself: a string hashes once per object, and kernel
        # sources are cached strings.
        self._making: dict[tuple, asyncio.Future] = {}

    def get(self, wgsl: str, label: str, entry_point: str, constants: dict) -> asyncio.Future:
        """The future of the pipeline for `wgsl`'s `entry_point` with `constants`."""
        constants = dict(sorted(constants.items()))
        key = (wgsl, entry_point, tuple(constants.items()))
        # The cache holds the task making a pipeline, so that concurrent requests for one
        # wait for it rather than build it again.
        making = self._making.get(key)
        if making is None:
            making = self._making[key] = asyncio.ensure_future(self._new(wgsl, label, entry_point, constants))
        return making

    async def _new(self, wgsl, label, entry_point, constants) -> Pipeline:
        handle, layout = await self._build(wgsl, label, entry_point, constants)
        return Pipeline(handle, layout, label)


def bind_group_entries(pipeline: Pipeline, buffers, label: str) -> list[tuple]:
    """(binding, buffer, offset, size) of each entry of `buffers`: a list binds 0..n-1 in
    order, a dict {binding: entry} names its bindings; an entry is a Buffer or
    (Buffer, offset, size)."""
    entries = []
    numbered = buffers.items() if isinstance(buffers, dict) else enumerate(buffers)
    for binding, entry in numbered:
        buffer, offset, size = (entry, 0, entry.size) if isinstance(entry, Buffer) else entry
        if offset + size > buffer.size:
            raise GPUError(
                f"bind group {label or pipeline.label!r}: binding {binding} range "
                f"[{offset}, {offset + size}) exceeds buffer {buffer.label!r} of {buffer.size} bytes"
            )
        entries.append((binding, buffer, offset, size))
    return entries
