"""Op handlers: one module per op family, each next to its kernel in wgsl/."""
