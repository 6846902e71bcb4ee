import asyncio
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

# Mesa's lavapipe complains on stderr without it; harmless, but noisy.
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


@pytest.fixture(scope="module")
def default_limits_device():
    """graph_programs' device, for a module's tests: one with WebGPU's default limits only."""
    import graph_programs

    kept = graph_programs._device
    asyncio.run(graph_programs.use_device("default"))
    yield graph_programs._device
    graph_programs._device = kept


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    """The bundled chat model's path without suffix (web/models/<stem>), exported first on
    a fresh checkout; the browser tests then find it current."""
    from export_tools.bundled import DEFAULT_OUT_DIR, STEM, ensure_bundled_model

    ensure_bundled_model(DEFAULT_OUT_DIR)
    return DEFAULT_OUT_DIR / STEM


@pytest.fixture(scope="session")
def tiny_chat_manifest(tmp_path_factory, bundled_model) -> str:
    """The manifest path of llama_fixtures.tiny_chat_export: a chat model that loads in
    seconds, for the tests of what happens around its use."""
    from llama_fixtures import tiny_chat_export

    return str(tiny_chat_export(str(tmp_path_factory.mktemp("tiny-chat-model")), bundled_model.with_suffix(".json")))
