"""Browser test harness: a local server for the web bundle, headless Chromium with WebGPU,
and a page with Pyodide + the freshly built pywebgpu wheel.

Any console error, page error or request to a non-local address fails the test that
caused it.
"""

import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from devtools.browser import PythonPage, launch_chromium  # noqa: E402
from devtools.bundle import WEB, build_web_bundle  # noqa: E402
from devtools.server import WebServer  # noqa: E402

LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]"}


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def web_bundle():
    return build_web_bundle()


@pytest.fixture(scope="session")
def web_server(web_bundle, tmp_path_factory):
    files = tmp_path_factory.mktemp("served")
    with WebServer(WEB, mounts={"/e2e/": Path(__file__).parent, "/files/": files}) as server:
        server.files_dir = files
        yield server


@pytest.fixture(scope="session")
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        yield browser
        browser.close()


class PageProblems:
    """Console errors, page errors and non-local requests seen in a page."""

    def __init__(self, page):
        self.items = []
        page.on("console", lambda m: m.type == "error" and self.items.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: self.items.append(f"page error: {e}"))
        page.context.route("**/*", self._route)

    def _route(self, route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host in LOCAL_HOSTS:
            route.continue_()
        else:
            self.items.append(f"request to a non-local address: {route.request.url}")
            route.abort()

    def take(self):
        items, self.items = self.items, []
        return items


def open_page(chromium, url):
    context = chromium.new_context()
    page = context.new_page()
    problems = PageProblems(page)
    page.goto(url)
    return page, problems


@pytest.fixture(scope="session")
def _python_page(chromium, web_server):
    page, problems = open_page(chromium, f"{web_server.url}/e2e/harness.html")
    python = PythonPage(page)
    python.problems = problems
    python.server = web_server
    yield python
    page.context.close()


@pytest.fixture
def python_page(_python_page):
    """Python (Pyodide + pywebgpu) on the page's main thread, shared across tests."""
    _python_page.problems.take()
    yield _python_page
    problems = _python_page.problems.take()
    assert not problems, "\n".join(problems)


@pytest.fixture
def fresh_page(chromium, web_server):
    """A new page at the harness URL, with its problem list; closed afterwards."""
    pages = []

    def make(path="/e2e/harness.html"):
        page, problems = open_page(chromium, web_server.url + path)
        pages.append(page)
        return page, problems

    yield make
    for page in pages:
        page.context.close()
