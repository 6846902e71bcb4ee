"""The benchmarks (CPython only, never shipped): `python -m bench` times the bundled model
against wllama in the browser and natively, `python -m bench.kernels` times single ops."""
