"""Elementwise cases shared by the native and browser GPU tests: (op, a shape, b shape)."""

import torch

BINARY_CASES = [
    ("add", (7,), (7,)),
    ("add", (2, 3), (3,)),
    ("add", (5, 1, 13), (1, 11, 1)),
    ("mul", (3, 17), (3, 1)),
    ("mul", (1,), (4, 31)),
    ("mul", (2, 3, 5, 7), (7,)),
    ("add", (1000,), ()),
    ("mul", (257, 129), (257, 129)),
]


def case_id(case):
    op, a, b = case
    return f"{op}-{'x'.join(map(str, a)) or 'scalar'}-{'x'.join(map(str, b)) or 'scalar'}"


def case_inputs(case, seed=0):
    op, a_shape, b_shape = case
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(a_shape, generator=generator, dtype=torch.float32)
    b = torch.randn(b_shape, generator=generator, dtype=torch.float32)
    return a, b


def reference(case, a, b):
    op = case[0]
    return {"add": torch.add, "mul": torch.mul}[op](a.double(), b.double())


def as_tensor(data: bytes, shape):
    return torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
