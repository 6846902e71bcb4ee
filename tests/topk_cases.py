"""Cases for the GPU top-k reducer, checked against torch.topk, and for the tokens it
draws from its top k (sampled decoding), checked against torch's softmax (shared by native
and browser tests)."""

import torch

# (vocabulary size, k, repetition penalty, penalized ids, layout of the logits: see
# case_logits)
TOP_K_CASES = [
    (49152, 1, 1.0, (), "shuffled"),
    (49152, 40, 1.0, (), "shuffled"),
    (128256, 64, 1.0, (), "shuffled"),
    (37, 5, 1.0, (), "shuffled"),
    (5000, 10, 1.3, (3, 17, 4095, 4999), "shuffled"),
    # Penalized ids among the top 10, repeated (each penalized once: twice would move it
    # further down), one past the vocabulary (ignored).
    (5000, 10, 1.001, (4999, 4996, 4999, 5000, 4996, 4990), "rising"),
    (49152, 40, 1.0, (), "rising"),
    (49152, 40, 1.0, (), "ties"),
]


def case_logits(n, seed=0, layout="shuffled"):
    """A logits row: "shuffled", distinct values (a permutation scaled), the largest
    spread over many chunks; "rising", distinct and increasing, the largest all in the
    last chunks; "ties", 64 values each repeated, shuffled (picks among equal logits go
    by index)."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=generator).float()
    if layout == "rising":
        order = torch.arange(n).float()
    elif layout == "ties":
        order = torch.floor(order * 64 / n) * (n / 64)
    return (order - n / 2) / 97.0


def expected_top_k(logits, k, penalty, penalized_ids):
    """The k largest, ties in index order (a stable sort), after the penalty on the
    distinct penalized ids within the row."""
    logits = logits.clone().double()
    for i in set(penalized_ids) & set(range(len(logits))):
        logits[i] = logits[i] / penalty if logits[i] > 0 else logits[i] * penalty
    values, indices = torch.sort(logits, descending=True, stable=True)
    return [[float(v), int(i)] for v, i in zip(values[:k], indices[:k])]


def check_top_k(got, want):
    assert [i for _, i in got] == [i for _, i in want]
    torch.testing.assert_close(torch.tensor([v for v, _ in got]).double(), torch.tensor([v for v, _ in want]).double(), atol=1e-5, rtol=1e-6)


# Draws from the top k: (vocabulary size, k, temperature, top_p). Each is drawn at the
# middle of every kept token's share and at 0 (draw_points): every kept token once.
DRAW_CASES = [
    (49152, 40, 0.2, 1.0),
    (49152, 40, 0.2, 0.5),
    (37, 5, 1.0, 0.95),
    (5000, 1, 0.7, 1.0),
]


def _draw_edges(logits, k, temperature, top_p):
    """(top k indices, kept ones' running shares of their total, top-p cut's margin) of
    the tempered softmax, in float64: kept, the shortest prefix whose share of all k
    reaches top_p."""
    values, indices = torch.topk(logits.double(), k)
    shares = torch.softmax(values / temperature, 0)
    running = torch.cumsum(shares, 0)
    kept = min(int((running < top_p).sum()) + 1, k)
    cut_margin = float((running[: kept if kept < k else k - 1] - top_p).abs().min()) if top_p < 1 else 1.0
    return indices, torch.cumsum(shares[:kept], 0) / shares[:kept].sum(), cut_margin


def draw_points(logits, k, temperature, top_p):
    """Uniforms at the middle of each kept token's share, and 0."""
    _, edges, _ = _draw_edges(logits, k, temperature, top_p)
    lows = torch.cat([torch.zeros(1, dtype=edges.dtype), edges[:-1]])
    return [0.0] + [float(u) for u in (lows + edges) / 2]


def expected_draw(logits, k, temperature, top_p, u):
    """(token, margin): the token at the uniform `u` (the first kept one whose running
    share exceeds u), and how far u and the top-p cut lie from the edges that decide it
    (shares of the total: below ~1e-5 float32 may decide otherwise)."""
    indices, edges, cut_margin = _draw_edges(logits, k, temperature, top_p)
    chosen = min(int((edges <= u).sum()), len(edges) - 1)
    return int(indices[chosen]), min(float((edges - u).abs().min()), cut_margin)


def check_draws(got, logits, k, temperature, top_p, points):
    """The GPU's draws ([value, id] per uniform in `points`) against expected_draw."""
    assert len(got) == len(points)
    for u, (value, token) in zip(points, got):
        want, margin = expected_draw(logits, k, temperature, top_p, u)
        assert margin > 1e-4, f"u={u}: too close to an edge for float32 to decide ({margin})"
        assert token == want, f"u={u}: drew {token}, torch {want}"
        assert value == float(logits[token])
