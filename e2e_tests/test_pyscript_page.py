"""PyScript pages written the conventional way: `packages` in the config, installed offline
from the local server (web/pyscript.html by name through its package index; a page naming
the wheels' URLs), under the server's content security policy."""

import json
import time
import zipfile

from test_chat_page import LOAD_TIMEOUT_MS, bundled_model, eager_greedy_reply  # noqa: F401 (fixture)

from devtools.bundle import WHEELS

# PyScript shows a Python error as a .py-error element.
PY_ERROR = ".py-error"


def wait_for(page, problems, selector, timeout_ms):
    """Wait until `selector` or a Python error shows, failing at once on a page error (an
    uncaught one, e.g. micropip's, does not always become a .py-error)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while not page.query_selector(f"{selector}, {PY_ERROR}"):
        assert not [p for p in problems.items if p.startswith("page error")], "\n".join(problems.items)
        assert time.monotonic() < deadline, f"{selector} did not show in {timeout_ms / 1000:.0f} s"
        page.wait_for_timeout(500)
    assert not page.query_selector(PY_ERROR), page.text_content(PY_ERROR)


def test_pyscript_page_replies(fresh_page, bundled_model):  # noqa: F811
    page, problems = fresh_page("/pyscript.html")
    wait_for(page, problems, '#reply[data-done="1"]', LOAD_TIMEOUT_MS)
    reply = page.text_content("#reply")
    assert reply == eager_greedy_reply(bundled_model, "What is the capital of France?", 32)
    assert "first token" in page.text_content("#speed")
    assert not problems.take()


def test_pyscript_packages_as_wheel_urls(fresh_page, web_server, web_bundle):
    """The other conventional form: `packages` lists the wheels' URLs (no index needed)."""
    wheels = [f"/vendor/wheels/{name}" for name in json.loads((WHEELS / "wheels.json").read_text()).values()]
    with zipfile.ZipFile(web_bundle) as wheel:
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        version = next(line.split(": ", 1)[1] for line in wheel.read(metadata).decode().splitlines() if line.startswith("Version: "))
    config = f'{{"interpreter": "/vendor/pyodide/pyodide.mjs", "packages": {wheels!r}}}'.replace("'", '"')
    (web_server.files_dir / "wheel-urls.html").write_text(
        '<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">'
        '<script type="module" src="/vendor/pyscript/core.js"></script>'
        f"<script type=\"py\" config='{config}'>\n"
        "from importlib.metadata import version\nfrom pyscript import document\n"
        "import flatbuffers, pywebgpu.runtime\n"
        'document.body.dataset.version = version("pywebgpu")\n</script>'
    )
    page, problems = fresh_page("/files/wheel-urls.html")
    wait_for(page, problems, "body[data-version]", LOAD_TIMEOUT_MS)
    assert page.eval_on_selector("body", "b => b.dataset.version") == version
    assert not problems.take()
