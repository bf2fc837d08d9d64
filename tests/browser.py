"""Headless Chromium for the tests of the pages this project writes, offline.

Debian's `chromium` (`apt-get install -y chromium`). Every host name resolves
nowhere and the proxy refuses, so a page that needed the network would not draw;
`run_chromium(..., netlog=PATH)` also keeps Chromium's network log, from which
`page_requests` lists what the page asked for, and `external_urls` finds any
address in the page's text. `DevToolsPage` drives a page that needs real time (a web
app talking to its server) through Chromium's DevTools protocol on a pipe. Where
Chromium is missing the browser tests skip, unless `EMITTER_FILTER_TESTS_NEED_CHROMIUM=1`
(as `.ci/run` sets it): then they fail.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

__all__ = [
    "CHROMIUM",
    "needs_chromium",
    "run_chromium",
    "page_requests",
    "external_urls",
    "DevToolsPage",
]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
_REQUIRED = os.environ.get("EMITTER_FILTER_TESTS_NEED_CHROMIUM", "") == "1"

#: Marks a test that opens a page in Chromium: skipped where there is none, unless required.
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not _REQUIRED,
    reason="headless Chromium is not installed (Debian: apt-get install -y chromium)",
)

# What in a page's text makes a browser fetch: an address (with a scheme, or protocol-
# relative) in an attribute that loads one, CSS `url()` of anything but data, `@import`.
# Names that only look like addresses (XML namespaces, RDF metadata in an SVG) load nothing.
_EXTERNAL = re.compile(
    r"""\b(?:src|href|action|poster|data|srcset)\s*=\s*["']?\s*"""
    r"""(?!#|data:|javascript:)(?:[a-z][a-z0-9+.-]*:|//)"""
    r"""|url\(\s*['"]?(?!data:|#)|@import""",
    re.I,
)


def _chromium_argv(tmp_path: Path, window: tuple[int, int], resolve: str = "") -> list[str]:
    """Headless Chromium with a new profile under `tmp_path`, offline: every host name
    resolves nowhere (but `resolve`, an address of this machine's) and the proxy refuses."""
    if CHROMIUM is None:
        pytest.fail("EMITTER_FILTER_TESTS_NEED_CHROMIUM=1, but chromium is not installed")
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    rules = "MAP * ~NOTFOUND" + (f", EXCLUDE {resolve}" if resolve else "")
    return [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--host-resolver-rules={rules}",
        "--proxy-server=127.0.0.1:9",
        f"--window-size={window[0]},{window[1]}",
    ]


def run_chromium(
    tmp_path: Path,
    *flags: str,
    url: str,
    netlog: Path | None = None,
    window: tuple[int, int] = (1200, 900),
) -> subprocess.CompletedProcess:
    """Runs headless Chromium on `url` with a new profile under `tmp_path`; fails if it fails."""
    argv = [
        *_chromium_argv(tmp_path, window),
        *([f"--log-net-log={netlog}"] if netlog else []),
        *flags,
        url,
    ]
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed


def page_requests(netlog: Path) -> list[str]:
    """URLs the page asked for: requests whose network isolation key is the file:// page's."""
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [
        event["params"]["url"]
        for event in log["events"]
        if event["type"] == start_job
        and str(event.get("params", {}).get("network_isolation_key", "")).startswith("file://")
    ]


def external_urls(html: str) -> list[str]:
    """What in a page's text could fetch something from elsewhere (empty for a self-contained one)."""
    return _EXTERNAL.findall(html)


class DevToolsPage:
    """One page of headless Chromium, driven over `--remote-debugging-pipe` (fds 3 and 4,
    messages of JSON each ended by a NUL): no client library, and real time, where
    `--virtual-time-budget` skips past what a server takes to answer.

    `resolve` is the one address (of this machine) the page may reach.
    """

    def __init__(
        self, tmp_path: Path, window: tuple[int, int] = (1400, 900), resolve: str = "127.0.0.1"
    ) -> None:
        ours_in, theirs_out = os.pipe()
        theirs_in, ours_out = os.pipe()

        def pipes() -> None:  # in the child: Chromium reads fd 3, writes fd 4
            read, write = os.dup(theirs_in), os.dup(theirs_out)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._log = open(tmp_path / "chromium.log", "w")  # noqa: SIM115 (closed in close)
        self._process = subprocess.Popen(
            [*_chromium_argv(tmp_path, window, resolve), "--remote-debugging-pipe", "about:blank"],
            preexec_fn=pipes,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        os.close(theirs_in)
        os.close(theirs_out)
        self._in, self._out, self._buffer, self._id = ours_in, ours_out, b"", 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=window[0],
            height=window[1],
            deviceScaleFactor=1,
            mobile=False,
        )

    def call(self, method: str, **params) -> dict:
        """Sends one command (to the page once attached) and returns its result."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if getattr(self, "_session", None):
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    raise AssertionError(
                        f"Chromium ended during {method}: "
                        f"{Path(self._log.name).read_text()[-2000:]}"
                    )
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply["result"]

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120.0):
        """Polls `expression` until it is truthy; returns it, or fails with the page's text."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.5)
        text = self.evaluate("document.body ? document.body.innerText : ''") or ""
        raise AssertionError(f"the page never showed {expression!r}; it shows: {text[:1500]}")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(
            base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        )

    def close(self) -> None:
        self._session = None  # Browser.close is the browser's, not the page's
        try:
            self.call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._in)
        os.close(self._out)
        self._log.close()

    def __enter__(self) -> DevToolsPage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
