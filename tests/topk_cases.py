"""Cases for the GPU top-k reducer, checked against torch.topk (shared by native and
browser tests)."""

import torch

# (vocabulary size, k, repetition penalty, penalized ids)
TOP_K_CASES = [
    (49152, 1, 1.0, ()),
    (49152, 40, 1.0, ()),
    (128256, 64, 1.0, ()),
    (37, 5, 1.0, ()),
    (5000, 10, 1.3, (3, 17, 4095, 4999)),
]


def case_logits(n, seed=0):
    # Distinct values (a permutation scaled) so the expected order is unique; the largest
    # are spread over many chunks.
    generator = torch.Generator().manual_seed(seed)
    return (torch.randperm(n, generator=generator).float() - n / 2) / 97.0


def expected_top_k(logits, k, penalty, penalized_ids):
    logits = logits.clone().double()
    for i in set(penalized_ids):
        logits[i] = logits[i] / penalty if logits[i] > 0 else logits[i] * penalty
    values, indices = torch.topk(logits, k)
    return [[float(v), int(i)] for v, i in zip(values, indices)]


def check_top_k(got, want):
    assert [i for _, i in got] == [i for _, i in want]
    torch.testing.assert_close(torch.tensor([v for v, _ in got]).double(), torch.tensor([v for v, _ in want]).double(), atol=1e-5, rtol=1e-6)
