"""Command lists recorded in Python and submitted whole, and the dispatch grid's bounds."""

from __future__ import annotations

from .buffers import Buffer
from .errors import GPUError
from .pipelines import BindGroup, Pipeline

# WebGPU's default maxComputeWorkgroupsPerDimension; no adapter here offers more.
MAX_WORKGROUPS_PER_DIMENSION = 65535


def check_grid(label: str, x: int, y: int, z: int):
    """Refuse a dispatch grid with more workgroups in a dimension than WebGPU allows."""
    limit = MAX_WORKGROUPS_PER_DIMENSION  # compared one by one: this runs for every dispatch recorded
    if not (0 <= x <= limit and 0 <= y <= limit and 0 <= z <= limit):
        raise GPUError(
            f"kernel {label!r}: dispatch grid {(x, y, z)} exceeds {MAX_WORKGROUPS_PER_DIMENSION} "
            "workgroups per dimension"
        )


def linear_grid(invocations: int, workgroup_size: int) -> tuple[int, int]:
    """A 2-D grid covering `invocations` threads, for kernels that flatten
    (global_id.x + global_id.y * num_workgroups.x * workgroup_size)."""
    groups = max(1, -(-invocations // workgroup_size))
    rows = -(-groups // MAX_WORKGROUPS_PER_DIMENSION)
    return -(-groups // rows), rows


class Recorder:
    """A list of dispatches and copies, recorded in Python and submitted whole, as often
    as wanted: record once, submit the same list many times.

    Consecutive dispatches share one compute pass (WebGPU orders their storage accesses);
    a copy ends the pass. `commands` holds (DISPATCH, pipeline, bind group, x, y, z) and
    (COPY, src, src offset, dst, dst offset, size) tuples, and (SUBMIT,): the commands
    before it go to the GPU as a command buffer of their own, the rest in the next.
    """

    DISPATCH = 0
    COPY = 1
    SUBMIT = 2

    def __init__(self):
        self.commands: list[tuple] = []
        # The backend's own form of `commands` (in the browser, a JS array), made at the
        # first submit and kept while nothing is added; `replaced` lists the commands to
        # convert again before the next submit.
        self.backend_form = None
        self.replaced: list[int] = []
        # Submitted in an open batch (Device.batched_submits), which encodes it at its end:
        # changing it before then would change what the earlier submit runs.
        self.pinned = False

    def dispatch(self, pipeline: Pipeline, bind_group: BindGroup, x: int, y: int = 1, z: int = 1):
        check_grid(pipeline.label, x, y, z)
        if self.pinned:
            self._refuse_change()
        self.commands.append((self.DISPATCH, pipeline, bind_group, x, y, z))
        self.backend_form = None

    def copy(self, src: Buffer, dst: Buffer, size: int, src_offset: int = 0, dst_offset: int = 0):
        if self.pinned:
            self._refuse_change()
        self.commands.append((self.COPY, src, src_offset, dst, dst_offset, size))
        self.backend_form = None

    def extend(self, commands):
        if self.pinned:
            self._refuse_change()
        self.commands.extend(commands)
        self.backend_form = None

    @staticmethod
    def _refuse_change():
        raise GPUError("a recorder submitted in an open batch of submits cannot change before the batch ends")

    def replace(self, start: int, commands):
        """Overwrite as many commands as given from index `start` on (commands whose
        arguments changed, not their number)."""
        if self.pinned:
            self._refuse_change()
        end = start + len(commands)
        if end > len(self.commands):
            raise GPUError(f"replacing commands [{start}, {end}) of a list of {len(self.commands)}")
        self.commands[start:end] = commands
        if self.backend_form is not None:
            self.replaced.extend(range(start, end))

