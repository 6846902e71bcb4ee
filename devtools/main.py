"""The README's main command: build the web bundle, make sure the bundled model
(SmolLM2-135M-Instruct, 4-bit) is exported under web/models/, and serve the chat demo on
127.0.0.1. With --headless (or when there is no display) it runs one chat turn in headless
Chromium instead, printing the streamed reply and its speed."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .browser import launch_chromium
from .bundle import WEB, build_web_bundle
from .server import WebServer

QUESTION = "What is the capital of France?"


def run_headless(url: str, question: str, timeout_s: float) -> int:
    """One chat turn on the demo page; 0 when the reply streamed to its end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page()
        page.on("console", lambda m: print(f"[page {m.type}] {m.text}", file=sys.stderr) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: print(f"[page error] {e}", file=sys.stderr))
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_function(
            "document.body.dataset.ready === '1' || document.getElementById('status').dataset.state === 'error'",
            timeout=timeout_s * 1000,
        )
        if page.eval_on_selector("#status", "e => e.dataset.state") == "error":
            print(f"error: {page.inner_text('#status')}", file=sys.stderr)
            browser.close()
            return 1
        print(f"{page.inner_text('#status')}  ({time.perf_counter() - started:.1f} s after opening the page)")
        print(f"\nuser: {question}\nassistant: ", end="", flush=True)
        page.fill("#prompt", question)
        page.click("#send")
        # Print the reply as it streams in: poll the last assistant message's text.
        shown, deadline = 0, time.monotonic() + timeout_s
        while True:
            text, state = page.evaluate(
                "() => { const m = [...document.querySelectorAll('#messages .assistant')].pop();"
                " return [m.querySelector('.body').textContent, m.dataset.state]; }"
            )
            print(text[shown:], end="", flush=True)
            shown = len(text)
            if state != "streaming" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        print()
        if state != "done":
            print(f"error: the reply ended in state {state!r}: {page.inner_text('#messages .assistant:last-child')}", file=sys.stderr)
            browser.close()
            return 1
        stats = page.eval_on_selector("#stats", "e => ({...e.dataset})")
        print(f"\n{page.inner_text('#stats')}")
        ttft = float(stats["ttftS"])
        speed = f"{float(stats['tokensPerS']):.1f} tokens/s" if stats.get("tokensPerS") else "n/a (a single token)"
        print(f"time to first token: {ttft:.2f} s; decode: {speed}; {stats['decodeTokens']} tokens, stop: {stats['stopReason']}")
        browser.close()
    return 0 if shown else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo.sh", description=__doc__)
    parser.add_argument("--headless", action="store_true", help="run one chat turn in headless Chromium and exit")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0 = any free)")
    parser.add_argument("--question", default=QUESTION, help=f"the headless chat turn (default {QUESTION!r})")
    parser.add_argument("--max-tokens", type=int, default=64, help="headless reply length limit (default 64)")
    parser.add_argument("--timeout", type=float, default=600, help="headless run time limit, seconds")
    args = parser.parse_args(argv)

    # Imported here: the export toolchain (torch, executorch) is slow to import.
    from export_tools.bundled import ensure_bundled_model

    print("building the pywebgpu wheel and the web bundle", flush=True)
    wheel = build_web_bundle()
    print(f"built {wheel.relative_to(WEB.parent)}")
    model = ensure_bundled_model(WEB / "models", progress=True)
    print(f"model {model.relative_to(WEB.parent) if model.is_relative_to(WEB.parent) else model}")
    headless = args.headless or not os.environ.get("DISPLAY")
    with WebServer(WEB, port=0 if headless else args.port) as server:
        if headless:
            url = f"{server.url}/index.html?max_tokens={args.max_tokens}"
            print(f"serving {url}; running one chat turn in headless Chromium")
            return run_headless(url, args.question, args.timeout)
        print(f"serving the pywebgpu chat demo at {server.url}/index.html  (Ctrl-C to stop)")
        print(f"the PyScript example is at {server.url}/pyscript.html")
        try:
            server.wait()
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
