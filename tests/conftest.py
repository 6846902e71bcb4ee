import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

# Mesa's lavapipe complains on stderr without it; harmless, but noisy.
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    """The bundled chat model's path without suffix (web/models/<stem>), exported first on
    a fresh checkout; the browser tests then find it current."""
    from export_tools.bundled import DEFAULT_OUT_DIR, STEM, ensure_bundled_model

    ensure_bundled_model(DEFAULT_OUT_DIR)
    return DEFAULT_OUT_DIR / STEM
