"""Op handlers: one module per op family, each next to its kernel in wgsl/.

Importing a module registers its handlers (see registry.py); load_all_ops imports them all.
"""

import importlib
import pkgutil


def load_all_ops():
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
