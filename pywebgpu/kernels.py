"""WGSL kernel sources, read the same way in the browser and in CPython.

The wheel ships the repository's top-level `wgsl/` folder as `pywebgpu/wgsl/`. In a source
checkout (tests run from the repo without building the wheel) that folder is the
repository's own `wgsl/`, one level above the package.
"""

from functools import cache
from importlib import resources
from pathlib import Path


def _kernel_dir():
    packaged = resources.files("pywebgpu").joinpath("wgsl")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "wgsl"


@cache
def load_wgsl(name: str) -> str:
    """The source of `wgsl/<name>.wgsl`."""
    path = _kernel_dir().joinpath(f"{name}.wgsl")
    if not path.is_file():
        raise FileNotFoundError(f"no WGSL kernel named {name!r} (looked for {path})")
    return path.read_text(encoding="utf-8")


# Directives a module using subgroup (quad) operations starts with (WGSL wants them before
# anything else; wgpu-native drops them, naga takes subgroup builtins without them).
QUAD_DIRECTIVES = "enable subgroups;\ndiagnostic(off, subgroup_uniformity);\n"
