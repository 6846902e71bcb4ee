"""devtools/server.py serves nothing outside its web root and mounts (path traversal, encoded
separators, absolute paths, symlinks out), sends its content security policy, and its
package index links the served wheels with their sha256; it answers byte ranges."""

import hashlib
import http.client
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from devtools.server import CONTENT_SECURITY_POLICY, WebServer

SECRET = b"outside-the-web-root"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("hardening")
    (top / "outside").mkdir()
    (top / "outside" / "secret.txt").write_bytes(SECRET)
    (top / "secret.txt").write_bytes(SECRET)
    web = top / "web"
    (web / "sub").mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>inside</title>")
    (web / "sub" / "page.txt").write_text("inside sub")
    (web / "link-out.txt").symlink_to(top / "outside" / "secret.txt")
    (web / "dir-out").symlink_to(top / "outside")
    (web / "link-in.txt").symlink_to(web / "sub" / "page.txt")
    (web / "vendor" / "wheels").mkdir(parents=True)
    (web / "vendor" / "wheels" / "demo_pkg-1.0-py3-none-any.whl").write_bytes(b"not really a zip")
    mounted = top / "mounted"
    mounted.mkdir()
    (mounted / "file.txt").write_text("inside the mount")
    (mounted / "link-out.txt").symlink_to(top / "secret.txt")
    with WebServer(web, mounts={"/m/": mounted}) as running:
        running.web = web
        yield running


def get(server, path: str, headers=()):
    """GET `path` sent exactly as written (no client-side normalization)."""
    address = urlparse(server.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.putrequest("GET", path, skip_accept_encoding=True)
    for name, value in headers:
        connection.putheader(name, value)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), body


@pytest.mark.parametrize(
    "path",
    [
        "/../secret.txt",
        "/../outside/secret.txt",
        "/sub/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/outside/secret.txt",
        "/..%2fsecret.txt",
        "/%2e%2e%2fsecret.txt",
        "/sub%2f..%2f..%2fsecret.txt",
        "/..%5csecret.txt",
        "//etc/passwd",
        "/%2fetc%2fpasswd",
        "/%2f%2fetc/passwd",
        "/link-out.txt",
        "/dir-out/secret.txt",
        "/dir-out/",
        "/m/../secret.txt",
        "/m/%2e%2e/secret.txt",
        "/m/..%2f..%2fsecret.txt",
        "/m/link-out.txt",
        "/m//etc/passwd",
        "/sub/%00/../../secret.txt",
        "/vendor/simple/..%2f..%2f..%2fsecret.txt",
    ],
)
def test_nothing_outside_the_web_root(server, path):
    status, _, body = get(server, path)
    assert status in (403, 404), f"{path}: HTTP {status}"
    assert SECRET not in body and b"root:" not in body


@pytest.mark.parametrize(
    "path, text",
    [
        ("/index.html", b"<!doctype html><title>inside</title>"),
        ("/sub/page.txt", b"inside sub"),
        ("/sub/../index.html", b"<!doctype html><title>inside</title>"),
        ("/link-in.txt", b"inside sub"),
        ("/m/file.txt", b"inside the mount"),
        ("/sub/page.txt?x=/../../secret.txt", b"inside sub"),
    ],
)
def test_files_inside_are_served(server, path, text):
    status, _, body = get(server, path)
    assert (status, body) == (200, text)


def test_content_security_policy(server):
    status, headers, _ = get(server, "/index.html")
    assert status == 200
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    # No remote origin anywhere: each source is a keyword, blob: or data:.
    for name, sources in directives.items():
        for source in sources.split():
            assert source in ("'self'", "'none'", "'unsafe-inline'", "'unsafe-eval'", "'wasm-unsafe-eval'", "blob:", "data:"), (name, source)
    assert directives["default-src"] == "'self'" and directives["object-src"] == "'none'"


def test_package_index_links_the_wheels(server):
    wheel = server.web / "vendor" / "wheels" / "demo_pkg-1.0-py3-none-any.whl"
    status, headers, body = get(server, "/vendor/simple/demo-pkg/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    (href,) = re.findall(rb'href="([^"]+)"', body)
    assert href.decode() == f"{server.url}/vendor/wheels/{wheel.name}#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}"
    assert get(server, f"/vendor/wheels/{wheel.name}")[2] == wheel.read_bytes()
    assert re.findall(rb'href="([^"]+)"', get(server, "/vendor/simple/")[2]) == [b"demo-pkg/"]
    assert get(server, "/vendor/simple/not-here/")[0] == 404


TEXT = "inside the mount"


@pytest.mark.parametrize(
    "asked, first, last",
    [("bytes=0-5", 0, 5), ("bytes=7-", 7, len(TEXT) - 1), ("bytes=3-999", 3, len(TEXT) - 1)],
)
def test_byte_ranges(server, asked, first, last):
    status, headers, body = get(server, "/m/file.txt", [("Range", asked)])
    assert (status, body) == (206, TEXT[first : last + 1].encode())
    assert headers["Content-Range"] == f"bytes {first}-{last}/{len(TEXT)}"
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_byte_range_past_the_end_or_outside(server):
    status, headers, _ = get(server, "/m/file.txt", [("Range", f"bytes={len(TEXT)}-")])
    assert (status, headers["Content-Range"]) == (416, f"bytes */{len(TEXT)}")
    assert get(server, "/m/link-out.txt", [("Range", "bytes=0-3")])[0] == 404
