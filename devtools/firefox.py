"""Headless Firefox (Debian's firefox-esr) with WebGPU, driven over Marionette: Firefox's
WebGPU is wgpu/naga on lavapipe here, a second engine beside Chromium's Dawn/SwiftShader.

`FirefoxPage.evaluate` has Playwright's `page.evaluate` shape, so devtools.browser's
PythonPage runs Python in a Firefox page as it does in Chromium. Console errors, page
errors and requests to a non-local address are collected (`take_problems`): console
errors from Firefox's stdout, the rest in its parent process, which also cancels a request
to a non-local address.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

FIREFOX = os.environ.get("PYWEBGPU_FIREFOX", "/usr/bin/firefox-esr")
# Lavapipe is the one Vulkan driver that works without /dev/dri; naming it skips the others.
LAVAPIPE_ICD = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"
STARTUP_TIMEOUT_S = 120
SHUTDOWN_TIMEOUT_S = 10
PR_SET_PDEATHSIG = 1  # linux/prctl.h

PREFS = {
    # WebGPU is off in Firefox ESR on Linux, and Mesa's lavapipe is on its blocklist.
    "dom.webgpu.enabled": True,
    "gfx.webgpu.ignore-blocklist": True,
    # Marionette picks a free port and writes it to the profile's MarionetteActivePort.
    "marionette.port": 0,
    # A quiet profile that never reaches the network on its own.
    "browser.shell.checkDefaultBrowser": False,
    "browser.aboutwelcome.enabled": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "startup.homepage_welcome_url": "",
    "startup.homepage_welcome_url.additional": "",
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
    "app.update.enabled": False,
    "app.update.auto": False,
    "browser.sessionstore.resume_from_crash": False,
    "toolkit.startup.max_resumed_crashes": -1,
    "extensions.update.enabled": False,
    "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False,
    "network.dns.disablePrefetch": True,
    "network.prefetch-next": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "browser.newtabpage.enabled": False,
    "browser.region.network.url": "",
    "browser.search.geoip.url": "",
    "services.settings.server": "http://127.0.0.1:1/",
    "remote.prefs.recommended": False,
    # Console messages of pages and their workers go to stdout (they are logged in the
    # content processes, out of the parent's sight).
    "devtools.console.stdout.content": True,
}

# Runs once in the parent process (Marionette's chrome context): collects page errors and
# non-local requests into window.pywebgpuProblems (window: Firefox's own browser window).
WATCH_PROBLEMS = """
const problems = (window.pywebgpuProblems = []);
const local = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);
Services.console.registerListener({
  observe(message) {
    if (!(message instanceof Ci.nsIScriptError) || message.isFromChromeContext) return;
    if (message.flags & (Ci.nsIScriptError.warningFlag | Ci.nsIScriptError.infoFlag)) return;
    problems.push(`page error: ${message.errorMessage} (${message.sourceName}:${message.lineNumber})`);
  },
});
Services.obs.addObserver({
  observe(subject) {
    const channel = subject.QueryInterface(Ci.nsIHttpChannel);
    const principal = channel.loadInfo.triggeringPrincipal;
    if (local.has(channel.URI.host) || !principal || principal.isSystemPrincipal) return;
    problems.push(`request to a non-local address: ${channel.URI.spec}`);
    channel.cancel(Cr.NS_BINDING_ABORTED);
  },
}, "http-on-modify-request");
"""

# Playwright's evaluate semantics in the page itself (sandbox=None: Xray wrappers would
# hide page objects such as an adapter's feature set): the function source is called with
# the one argument, its awaited result or error handed back.
EVALUATE = """
const [source, arg, done] = arguments;
(async () => (0, eval)(`(${source})`)(arg))().then(
  (value) => done({ value: value === undefined ? null : value }),
  (error) => done({ error: String(error && error.stack ? `${error}\\n${error.stack}` : error) }),
);
"""


class FirefoxError(RuntimeError):
    pass


def _die_with_parent():
    """In the child before exec: the kernel kills Firefox if the test process dies first."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Firefox:
    """firefox-esr --headless in a fresh profile, a Marionette session to it; a context
    manager that kills the browser (its whole process group) and deletes the profile."""

    def __init__(self, script_timeout_s: float = 1800):
        self.script_timeout_s = script_timeout_s
        self.profile = Path(tempfile.mkdtemp(prefix="pywebgpu-firefox-"))
        self.process = None
        self.marionette = None
        self.first_tab = None
        self._log_read = 0  # bytes of firefox.log take_problems has read

    def __enter__(self):
        from marionette_driver.marionette import Marionette

        if not os.path.exists(FIREFOX):
            raise FirefoxError(f"Firefox not found at {FIREFOX}: run scripts/setup.sh")
        (self.profile / "user.js").write_text("".join(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in PREFS.items()))
        env = dict(os.environ, MOZ_HEADLESS="1")
        if os.path.exists(LAVAPIPE_ICD):
            env.setdefault("VK_ICD_FILENAMES", LAVAPIPE_ICD)
        try:
            with (self.profile / "firefox.log").open("wb") as log:
                self.process = subprocess.Popen(
                    # System access: the problem watchers run in the parent process.
                    [FIREFOX, "--headless", "--marionette", "-remote-allow-system-access", "--no-remote", "--profile", str(self.profile), "about:blank"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            port = self._marionette_port()
            self.marionette = Marionette(host="127.0.0.1", port=port, socket_timeout=self.script_timeout_s + 60)
            self.marionette.start_session(timeout=STARTUP_TIMEOUT_S)
            self.marionette.timeout.script = self.script_timeout_s
            self.marionette.timeout.page_load = STARTUP_TIMEOUT_S
            self.first_tab = self.marionette.current_window_handle
            with self.marionette.using_context("chrome"):
                self.marionette.execute_script(WATCH_PROBLEMS, new_sandbox=False, sandbox=None)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _marionette_port(self) -> int:
        port_file = self.profile / "MarionetteActivePort"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise FirefoxError(f"Firefox exited with status {self.process.returncode}: {self.log()}")
            if port_file.exists() and port_file.read_text().strip():
                return int(port_file.read_text())
            time.sleep(0.2)
        raise FirefoxError(f"Firefox started no Marionette server within {STARTUP_TIMEOUT_S} s: {self.log()}")

    def log(self) -> str:
        """The end of Firefox's stdout and stderr."""
        path = self.profile / "firefox.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def __exit__(self, *exc):
        # No Marionette goodbye, which could wait on a hung browser: killing it ends the session.
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(SHUTDOWN_TIMEOUT_S)
        if self.process is not None:
            try:  # Firefox's content processes share its process group
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def open(self, url: str) -> FirefoxPage:
        """A new tab at `url`, loaded."""
        handle = self.marionette.open(type="tab")["handle"]
        self.marionette.switch_to_window(handle)
        self.marionette.navigate(url)
        return FirefoxPage(self, handle)

    def take_problems(self) -> list[str]:
        """Console errors, page errors and non-local requests since the last call."""
        with self.marionette.using_context("chrome"):
            problems = self.marionette.execute_script("return window.pywebgpuProblems.splice(0);", new_sandbox=False, sandbox=None)
        with (self.profile / "firefox.log").open("rb") as log:
            log.seek(self._log_read)
            lines = log.read().rpartition(b"\n")[0]
        self._log_read += len(lines) + 1 if lines else 0
        # One line each: the console writes strings JSON-quoted.
        errors = [line.decode(errors="replace") for line in lines.split(b"\n") if line.startswith(b"console.error: ")]
        return [f"console error: {line.removeprefix('console.error: ')}" for line in errors] + problems


class FirefoxPage:
    """A loaded page in its own tab, with Playwright's `evaluate(function_source, arg)`."""

    def __init__(self, firefox: Firefox, handle: str):
        self.firefox = firefox
        self.marionette = firefox.marionette
        self.handle = handle

    def _select(self):
        if self.marionette.current_window_handle != self.handle:
            self.marionette.switch_to_window(self.handle)

    def evaluate(self, function_source: str, arg=None):
        self._select()
        answer = self.marionette.execute_async_script(EVALUATE, script_args=[function_source, arg], sandbox=None)
        if "error" in answer:
            raise FirefoxError(answer["error"])
        return answer["value"]

    def close(self):
        """Close the tab; the browser's first, blank one is selected."""
        self._select()
        self.marionette.close()
        self.marionette.switch_to_window(self.firefox.first_tab)
