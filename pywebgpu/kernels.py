"""WGSL kernel sources, read the same way in the browser and in CPython.

The wheel ships the repository's top-level `wgsl/` folder as `pywebgpu/wgsl/`; in a source
checkout that folder is the repository's own `wgsl/`, one level above the package.
A kernel file may start with lines `#include "common/reduce.wgsl"` (paths relative to
`wgsl/`): each names a file of shared helpers, pasted in once per module.
"""

import re
from functools import cache
from importlib import resources
from pathlib import Path

_INCLUDE = re.compile(r'^#include "([\w/.-]+)\.wgsl"[ \t]*$', re.MULTILINE)


def _kernel_dir():
    packaged = resources.files("pywebgpu").joinpath("wgsl")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "wgsl"


def _read(name: str) -> str:
    path = _kernel_dir().joinpath(*f"{name}.wgsl".split("/"))
    if not path.is_file():
        raise FileNotFoundError(f"no WGSL kernel named {name!r} (looked for {path})")
    return path.read_text(encoding="utf-8")


def _expand(name: str, included: set) -> str:
    def include(match) -> str:
        if match[1] in included:
            return ""
        included.add(match[1])
        return _expand(match[1], included)

    return _INCLUDE.sub(include, _read(name))


@cache
def load_wgsl(name: str) -> str:
    """The source of `wgsl/<name>.wgsl` (`name` may hold folders: "linear/gemv"), its
    includes expanded."""
    return _expand(name, {name})


# Directives a module using subgroup (quad) operations starts with (WGSL wants them before
# anything else; wgpu-native drops them, naga takes subgroup builtins without them).
QUAD_DIRECTIVES = "enable subgroups;\ndiagnostic(off, subgroup_uniformity);\n"
