"""Headless Chromium for the tests of the pages this project writes, offline.

Debian's `chromium` (`apt-get install -y chromium`). Every host name resolves
nowhere and the proxy refuses, so a page that needed the network would not draw;
`run_chromium(..., netlog=PATH)` also keeps Chromium's network log, from which
`page_requests` lists what the page asked for, and `external_urls` finds any
address in the page's text. Where Chromium is missing the browser tests skip,
unless `EMITTER_FILTER_TESTS_NEED_CHROMIUM=1` (as `.ci/run` sets it): then they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "needs_chromium", "run_chromium", "page_requests", "external_urls"]

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


def run_chromium(
    tmp_path: Path, *flags: str, url: str, netlog: Path | None = None,
    window: tuple[int, int] = (1200, 900),
) -> subprocess.CompletedProcess:
    """Runs headless Chromium on `url` with a new profile under `tmp_path`; fails if it fails."""
    if CHROMIUM is None:
        pytest.fail("EMITTER_FILTER_TESTS_NEED_CHROMIUM=1, but chromium is not installed")
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
        f"--window-size={window[0]},{window[1]}",
        *([f"--log-net-log={netlog}"] if netlog else []), *flags, url,
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
