"""Shared by tests/ and e2e_tests/."""

import functools


def pytest_configure(config):
    """ExecuTorch's Vulkan partitioner traces its fusion patterns' graphs (RoPE) anew in
    every lowering, twice, at seconds each; the graphs never change, so a test session
    traces each once and its hundreds of exports reuse them."""
    from executorch.backends.vulkan.patterns import fusable_patterns

    for entry in fusable_patterns.values():
        if entry.get_graphs_fn is not None:
            entry.get_graphs_fn = functools.cache(entry.get_graphs_fn)
