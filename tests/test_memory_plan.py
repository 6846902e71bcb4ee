"""Memory planning (runtime/memory_plan.py) without a GPU: tensors whose lives overlap never
share a buffer, every tensor fits its buffer, and a small plan is the one worked by hand."""

import itertools
import random

import pytest

from pywebgpu.runtime.memory_plan import assign_slots, lifetimes, plan_memory


def test_a_small_plan_is_the_one_worked_by_hand():
    # input 1 → op0 → 2 → op1 → 3 → op2 (view) → 5 → op3 → 4 → op4 → 6 (output); 7 is unused.
    op_uses = [[1, 2], [2, 3], [3, 5], [5, 4], [4, 6]]
    tensor_bytes = {1: 16, 2: 64, 3: 64, 4: 32, 5: 64, 6: 16, 7: 8}
    views = {5: 3}
    assert lifetimes(op_uses, views, [1], [6]) == {1: (-1, 0), 2: (0, 1), 3: (1, 3), 4: (3, 4), 6: (4, 5)}
    # By size, then span: 2 opens slot 0; 3 (and its view 5) overlaps it at op 1 and opens
    # slot 1; 4 fits slot 0 after 2 (a 32-byte group in a 64-byte slot); 1 overlaps 2 at op
    # 0 but fits before 3; 6 overlaps 4 at op 4 but fits after 3.
    assert plan_memory(op_uses, tensor_bytes, views, [1], [6]) == [(64, [2, 4]), (64, [3, 5, 1, 6])]


def test_tiny_tensors_get_four_bytes():
    assert plan_memory([[1]], {1: 2}, {}, [], []) == [(4, [1])]


def _overlap(a, b):
    return a[0] <= b[1] and b[0] <= a[1]


@pytest.mark.parametrize("seed", range(50))
def test_random_lifetimes_never_share_a_slot_while_both_live(seed):
    rng = random.Random(seed)
    spans, sizes = {}, {}
    for group in range(rng.randint(1, 40)):
        first = rng.randint(-1, 30)
        spans[group] = (first, first + rng.randint(0, 10))
        sizes[group] = rng.choice([4, 16, 64, 256, 1000])
    slots = assign_slots(spans, sizes)
    placed = [group for _, groups in slots for group in groups]
    assert sorted(placed) == sorted(sizes)
    for size, groups in slots:
        assert all(sizes[g] <= size for g in groups)
        for a, b in itertools.combinations(groups, 2):
            assert not _overlap(spans[a], spans[b]), (a, spans[a], b, spans[b])


@pytest.mark.parametrize("seed", range(50))
def test_random_graphs_plan_against_live_ranges_found_by_brute_force(seed):
    rng = random.Random(seed)
    ids = list(range(rng.randint(2, 30)))
    n_ops = rng.randint(1, 25)
    op_uses = [rng.sample(ids, rng.randint(1, min(3, len(ids)))) for _ in range(n_ops)]
    views = {}
    for tensor_id in ids:  # a view's source is a tensor of a lower id that is no view
        sources = [s for s in ids if s < tensor_id and s not in views]
        if sources and rng.random() < 0.2:
            views[tensor_id] = rng.choice(sources)
    inputs, outputs = rng.sample(ids, 2), rng.sample(ids, 1)
    tensor_bytes = {t: rng.choice([2, 4, 48, 64, 512]) for t in ids}

    def live(tensor_id):
        group = views.get(tensor_id, tensor_id)
        members = {t for t in ids if views.get(t, t) == group}
        times = [i for i, used in enumerate(op_uses) if members & set(used)]
        times += [-1] * bool(members & set(inputs)) + [n_ops] * bool(members & set(outputs))
        return (min(times), max(times)) if times else None

    plan = plan_memory(op_uses, tensor_bytes, views, inputs, outputs)
    planned = [t for _, tensors in plan for t in tensors]
    assert sorted(planned) == sorted(t for t in ids if live(t) is not None)
    for size, tensors in plan:
        assert all(max(4, tensor_bytes[t]) <= size for t in tensors)
        for a, b in itertools.combinations(tensors, 2):
            if views.get(a, a) != views.get(b, b):
                assert not _overlap(live(a), live(b)), (a, live(a), b, live(b))
