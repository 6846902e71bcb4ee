"""A local HTTP server for the web bundle: correct MIME types for Pyodide, and COOP/COEP
headers so pages are cross-origin isolated (SharedArrayBuffer, finer timers)."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

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
}


class _Handler(http.server.SimpleHTTPRequestHandler):
    mounts: dict[str, Path] = {}
    post_handlers: dict = {}
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME_TYPES}

    def translate_path(self, path):
        # Longest mount prefix wins; everything else comes from the web root.
        url_path = path.split("?", 1)[0].split("#", 1)[0]
        for prefix in sorted(self.mounts, key=len, reverse=True):
            if url_path.startswith(prefix):
                relative = url_path[len(prefix) :].lstrip("/")
                target = (self.mounts[prefix] / relative).resolve()
                if self.mounts[prefix].resolve() in (target, *target.parents):
                    return str(target)
                return str(self.mounts[prefix] / "__outside__")
        return super().translate_path(path)

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
