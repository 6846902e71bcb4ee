"""float16 values for the widening kernel (ops/widen.py), and their float32 images from
PyTorch's own conversion."""

import torch

# Counts: one half of a word, whole words, odd counts with a padding half.
WIDEN_COUNTS = (1, 2, 7, 1001)
# Zeros of both signs, the largest and the smallest normal and subnormal float16s (the
# Vulkan serializer clamps constants to the finite range), then random values of many
# magnitudes: 4-bit scales of near-zero weight groups are small.
_SPECIAL = [0.0, -0.0, 65504.0, -65504.0, 2.0**-14, -(2.0**-14), 2.0**-24, -(2.0**-24), 3.0e-6, 1.0, -1.5]


def widen_case(count: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(count)
    random = torch.randn(count, generator=generator) * 10.0 ** torch.randint(-7, 4, (count,), generator=generator)
    values = torch.cat([torch.tensor(_SPECIAL), random])[:count] if count > len(_SPECIAL) else torch.tensor(_SPECIAL[:count])
    return values.to(torch.float16)


def check_widened(got: bytes, halves: torch.Tensor):
    """Bit for bit the float32 values of `halves` (signs of zeros included)."""
    want = halves.float().numpy().tobytes()
    assert len(got) == len(want)
    mismatched = [i for i in range(len(halves)) if got[4 * i : 4 * i + 4] != want[4 * i : 4 * i + 4]]
    assert not mismatched, f"{len(mismatched)} values differ, first at {mismatched[0]}: {halves[mismatched[0]].item()}"
