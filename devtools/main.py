"""The README's main command: build the web bundle, serve web/ on 127.0.0.1, and (with
--headless, or when there is no display) drive the page in headless Chromium and print
what it shows."""

from __future__ import annotations

import argparse
import os
import sys

from .browser import launch_chromium
from .bundle import WEB, build_web_bundle
from .server import WebServer


def run_headless(url: str, timeout_s: float) -> int:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page()
        page.on("console", lambda m: print(f"[page {m.type}] {m.text}") if m.type == "error" else None)
        page.goto(url)
        page.wait_for_function(
            "document.body.dataset.done === '1' || document.getElementById('status').dataset.state === 'error'",
            timeout=timeout_s * 1000,
        )
        state = page.eval_on_selector("#status", "e => e.dataset.state")
        print(page.inner_text("#status"))
        print(page.inner_text("#result"))
        browser.close()
    return 0 if state == "ok" else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.sh", description=__doc__)
    parser.add_argument("--headless", action="store_true", help="drive the page in headless Chromium and exit")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0 = any free)")
    parser.add_argument("--timeout", type=float, default=300, help="headless run time limit, seconds")
    args = parser.parse_args(argv)

    wheel = build_web_bundle()
    print(f"built {wheel.relative_to(WEB.parent)}")
    headless = args.headless or not os.environ.get("DISPLAY")
    with WebServer(WEB, port=0 if headless else args.port) as server:
        url = f"{server.url}/index.html"
        if headless:
            print(f"serving {url}; running it in headless Chromium")
            return run_headless(url, args.timeout)
        print(f"serving the pywebgpu demo at {url}  (Ctrl-C to stop)")
        try:
            server.wait()
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
