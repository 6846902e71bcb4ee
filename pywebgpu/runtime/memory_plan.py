"""Memory planning: which activation tensors share a buffer, from their lifetimes alone.

Pure functions over op indexes and tensor ids (no GPU, no graph): a tensor and the views
of it form one group, live from its first use to its last (graph inputs from before the
first op, outputs to after the last); groups whose lives do not overlap share a buffer.
The exporter's mem_obj_ids plan each view as a tensor of its own; planning here lets
views cost nothing.
"""

from __future__ import annotations

import bisect


def lifetimes(op_uses, views: dict[int, int], inputs, outputs) -> dict[int, tuple[int, int]]:
    """group → (first use, last use), where `op_uses[i]` names the tensors op i reads or
    writes, a group is a tensor or its view source (`views`: view id → source id), graph
    `inputs` are used at -1 and `outputs` after the last op."""
    span: dict[int, list[int]] = {}

    def use(tensor_id, index):
        group = views.get(tensor_id, tensor_id)
        first_last = span.setdefault(group, [index, index])
        first_last[0], first_last[1] = min(first_last[0], index), max(first_last[1], index)

    for index, tensor_ids in enumerate(op_uses):
        for tensor_id in tensor_ids:
            use(tensor_id, index)
    for tensor_id in inputs:
        use(tensor_id, -1)
    for tensor_id in outputs:
        use(tensor_id, len(op_uses))
    return {group: (first, last) for group, (first, last) in span.items()}


def assign_slots(spans: dict[int, tuple[int, int]], sizes: dict[int, int]) -> list[tuple[int, list[int]]]:
    """Buffers for the groups of `sizes` (group → bytes), live over `spans`: (size, groups)
    each. Largest groups first, each into the first slot free over its whole life, else a
    new slot of its size; a slot's size is that of its first group and never grows, so
    tensors of one size that never overlap (each layer's MLP activations) share one slot.
    Groups of equal size go in the order of their spans, then of `sizes`."""
    slots: list[tuple[int, list, list]] = []  # (size, sorted [first, last] spans, groups)
    for group in sorted(sizes, key=lambda g: (-sizes[g], spans[g])):
        first, last = spans[group]
        for slot in slots:
            taken = slot[1]
            at = bisect.bisect_left(taken, [first, last])
            if (at == 0 or taken[at - 1][1] < first) and (at == len(taken) or last < taken[at][0]):
                break
        else:
            slot = (sizes[group], [], [])
            slots.append(slot)
            at = 0
        slot[1].insert(at, [first, last])
        slot[2].append(group)
    return [(size, groups) for size, _, groups in slots]


def plan_memory(op_uses, tensor_bytes: dict[int, int], views: dict[int, int], inputs, outputs) -> list[tuple[int, list[int]]]:
    """Buffers for the tensors of `tensor_bytes` (id → bytes, in a stable order): (size,
    tensor ids) each. A group's size is its largest member's (at least 4 bytes); a tensor
    that no op, input or output uses gets no buffer (e.g. one folded by fusion)."""
    spans = lifetimes(op_uses, views, inputs, outputs)
    members: dict[int, list[int]] = {}
    for tensor_id in tensor_bytes:
        group = views.get(tensor_id, tensor_id)
        if group in spans:
            members.setdefault(group, []).append(tensor_id)
    sizes = {group: max(4, *(tensor_bytes[t] for t in ids)) for group, ids in members.items()}
    return [(size, [t for group in groups for t in members[group]]) for size, groups in assign_slots(spans, sizes)]
