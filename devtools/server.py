"""A local HTTP server for the web bundle: correct MIME types for Pyodide, COOP/COEP headers
so pages are cross-origin isolated (SharedArrayBuffer, finer timers), a content security
policy, nothing served from outside its folders, byte ranges of files (HTTP Range), and a
package index of the bundle's wheels."""

from __future__ import annotations

import functools
import hashlib
import html
import http.server
import io
import re
import threading
from pathlib import Path
from urllib.parse import unquote

MIME_TYPES = {
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".pte": "application/octet-stream",
    ".gguf": "application/octet-stream",
    ".wgsl": "text/plain",
    ".toml": "text/plain",
}

# Same-origin everything; what each source list allows beyond it, and why:
#   script-src 'wasm-unsafe-eval': Pyodide (and wllama) compile WebAssembly;
#   script-src 'unsafe-eval': PyScript builds its hooks with Function(), and pywebgpu's
#     GPU layer and download make their JS helpers with Pyodide's run_js (an eval);
#   script-src/worker-src blob:: the wheel imports its download loop and starts its chunk
#     hasher Worker from Blobs (pywebgpu/llm/model.py);
#   connect-src blob:: the chat page reads a local model's files through Blob URLs;
#   style-src 'unsafe-inline': the pages' <style> blocks and PyScript's injected styles;
#   img-src data:: the pages' empty data: favicon.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'wasm-unsafe-eval' 'unsafe-eval' blob:",
        "worker-src 'self' blob:",
        "connect-src 'self' blob:",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)

# A PEP 503 simple index of the bundle's wheels (web/vendor/wheels) for micropip, PyScript's
# `packages` installer; its links are absolute since micropip downloads http(s) URLs only.
SIMPLE_INDEX = "/vendor/simple/"
INDEX_WHEELS = Path("vendor") / "wheels"


def _project(wheel_name: str) -> str:
    return wheel_name.split("-", 1)[0].replace("_", "-").lower()


# One range of bytes (what browsers and pywebgpu's piece reads ask for); others get the file.
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class _Limited(io.RawIOBase):
    """The next `left` bytes of an open file, for copyfile."""

    def __init__(self, file, left: int):
        self.file, self.left = file, left

    def read(self, size=-1):
        size = self.left if size < 0 else min(size, self.left)
        data = self.file.read(size)
        self.left -= len(data)
        return data

    def close(self):
        self.file.close()
        super().close()


class _Handler(http.server.SimpleHTTPRequestHandler):
    mounts: dict[str, Path] = {}
    post_handlers: dict = {}
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}

    def _served_path(self, path: str) -> Path | None:
        """The file or folder a URL path names (the longest mount prefix wins, else the web
        root), or None where it would lie outside that folder (`..`, symlinks)."""
        url_path = unquote(path.split("?", 1)[0].split("#", 1)[0])
        base, rest = Path(self.directory), url_path
        for prefix in sorted(self.mounts, key=len, reverse=True):
            if url_path.startswith(prefix):
                base, rest = self.mounts[prefix], url_path[len(prefix) :]
                break
        try:
            base = base.resolve()
            target = base.joinpath(*[part for part in rest.split("/") if part]).resolve()
        except (OSError, ValueError):  # a NUL byte, a symlink loop
            return None
        return target if target == base or base in target.parents else None

    def translate_path(self, path):
        served = self._served_path(path)
        return str(served) if served is not None else str(Path(self.directory) / "__outside__" / "missing")

    def send_head(self):
        url_path = unquote(self.path.split("?", 1)[0])
        if url_path.startswith(SIMPLE_INDEX):
            return self._send_index_page(url_path[len(SIMPLE_INDEX) :].strip("/"))
        served = self._served_path(self.path)
        if served is None:
            self.send_error(404, "Not found")
            return None
        asked = _RANGE.fullmatch(self.headers.get("Range", ""))
        if asked and served.is_file():
            return self._send_range(served, asked)
        return super().send_head()

    def _send_range(self, path: Path, asked):
        """206 with bytes first..last of the file (last omitted: to its end), or 416."""
        size = path.stat().st_size
        first = int(asked[1])
        last = min(int(asked[2]), size - 1) if asked[2] else size - 1
        if first > last:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        file = open(path, "rb")
        file.seek(first)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        return _Limited(file, last - first + 1)

    def _send_index_page(self, project: str):
        wheels = sorted((Path(self.directory) / INDEX_WHEELS).glob("*.whl"))
        origin = f"http://{self.headers.get('Host') or '%s:%d' % self.server.server_address[:2]}"
        if not project:
            links = [f'<a href="{p}/">{p}</a>' for p in sorted({_project(w.name) for w in wheels})]
        else:
            links = [
                f'<a href="{html.escape(origin)}/{INDEX_WHEELS.as_posix()}/{html.escape(w.name)}'
                f'#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{html.escape(w.name)}</a>'
                for w in wheels
                if _project(w.name) == project
            ]
            if not links:
                self.send_error(404, f"no wheel of {project!r} in {INDEX_WHEELS}")
                return None
        body = ('<!doctype html><meta name="pypi:repository-version" content="1.0">\n' + "\n".join(links)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def do_POST(self):
        handler = self.post_handlers.get(self.path.split("?", 1)[0])
        if handler is None:
            self.send_error(404)
            return
        handler(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.send_response(204)
        self.end_headers()

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format, *args):
        pass


class WebServer:
    """Serves `root` (plus optional URL-prefix → folder `mounts`) on 127.0.0.1 in a thread;
    `post_handlers` (URL path → function of the request body) take POST requests."""

    def __init__(self, root: Path, mounts: dict[str, Path] | None = None, port: int = 0, post_handlers: dict | None = None):
        handler = type(
            "Handler",
            (_Handler,),
            {"mounts": {k: Path(v) for k, v in (mounts or {}).items()}, "post_handlers": dict(post_handlers or {})},
        )
        self._httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", port), functools.partial(handler, directory=str(root))
        )
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()

    def wait(self):
        self._thread.join()
