"""Headless Chromium driven through the DevTools protocol over a pipe (no WebDriver, no extra
Python package): used by tests/test_reports_browser.py to check every HTML report as a person
would see it, and runnable by hand to check one report or take a screenshot for docs/::

    python tests/_browser.py REPORT.html [--width 1280] [--png OUT.png] [--height 1600]

Why the pipe: Chromium's ``--remote-debugging-pipe`` reads protocol commands (JSON, each ended
by a NUL byte) on file descriptor 3 and writes answers and events on 4. That needs nothing but
the ``chromium`` Debian package — no chromedriver whose version must match the browser, no
Selenium or WebSocket client, and no TCP port (nothing listens on the network).

Chromium runs with the flags of .library's machine notes: --headless --no-sandbox --disable-gpu
--disable-quic --no-first-run --disable-background-networking --disable-component-update
--disable-sync, in a throw-away --user-data-dir.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
]


def chromium_path() -> str | None:
    """The Chromium binary, or None where it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


# What a report must satisfy, measured in the page: the document never scrolls sideways, no
# element scrolls sideways inside it or sticks out past the window's right edge, and every
# image has decoded.
LAYOUT_JS = r"""
(() => {
  const de = document.documentElement;
  const vw = window.innerWidth;
  const sideways = [];
  const past = [];
  const name = (el) => el.tagName.toLowerCase() + (el.className ? '.' + el.className : '')
    + (el.id ? '#' + el.id : '');
  for (const el of document.body.querySelectorAll('*')) {
    const cs = getComputedStyle(el);
    if ((cs.overflowX === 'auto' || cs.overflowX === 'scroll')
        && el.scrollWidth > el.clientWidth + 1) {
      sideways.push(name(el) + ' ' + el.scrollWidth + '>' + el.clientWidth);
    }
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > de.clientWidth + 1) {
      past.push(name(el) + ' right=' + Math.round(r.right) + ': '
        + (el.textContent || '').trim().slice(0, 60));
    }
  }
  const imgs = Array.from(document.images);
  return {
    scrollWidth: de.scrollWidth,
    clientWidth: de.clientWidth,
    innerWidth: vw,
    scrollHeight: de.scrollHeight,
    images: imgs.length,
    brokenImages: imgs.filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => i.alt),
    sidewaysScrollers: sideways.slice(0, 10),
    pastRightEdge: past.slice(0, 10),
    tables: document.querySelectorAll('table').length,
  };
})()
"""


@dataclass
class PageCheck:
    """What :meth:`Chromium.check` measured on one page."""

    url: str
    layout: dict[str, Any]
    console_errors: list[str] = field(default_factory=list)
    png: bytes | None = None

    def problems(self) -> list[str]:
        """Every way the page fails the report rules (empty: it passes)."""
        lay = self.layout
        out = []
        if lay["scrollWidth"] > lay["innerWidth"] or lay["scrollWidth"] > lay["clientWidth"]:
            out.append(
                f"page scrolls sideways: scrollWidth {lay['scrollWidth']} > window "
                f"{lay['innerWidth']} (client {lay['clientWidth']})"
            )
        if lay["brokenImages"]:
            out.append(f"images not loaded: {lay['brokenImages']}")
        if lay["sidewaysScrollers"]:
            out.append(f"elements scrolling sideways: {lay['sidewaysScrollers']}")
        if lay["pastRightEdge"]:
            out.append(f"elements past the right edge: {lay['pastRightEdge']}")
        if self.console_errors:
            out.append(f"console errors: {self.console_errors}")
        return out


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless Chromium process; :meth:`check` opens a page in a new tab of it."""

    def __init__(self, binary: str | None = None, *, timeout: float = 60.0) -> None:
        binary = binary or chromium_path()
        if binary is None:
            raise BrowserError("chromium is not installed (Debian package `chromium`)")
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="searchveil-chromium-")
        to_r, to_w = os.pipe()  # we write commands, Chromium reads them on fd 3
        from_r, from_w = os.pipe()  # Chromium writes on fd 4, we read

        def fds() -> None:  # in the child, before exec: put the pipe ends on 3 and 4
            a, b = os.dup(to_r), os.dup(from_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # the child closes every other descriptor after ``fds`` has run, keeping 3 and 4
            pass_fds=(3, 4),
            preexec_fn=fds,
        )
        os.close(to_r)
        os.close(from_w)
        self._w, self._r = to_w, from_r
        self._buf = b""
        self._id = 0
        self._events: list[dict[str, Any]] = []

    # -- protocol -------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("timed out waiting for Chromium")
            ready, _, _ = select.select([self._r], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed the DevTools pipe (did it start?)")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)  # type: ignore[no-any-return]

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None):
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self._events.append(m)

    def _wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for i, m in enumerate(self._events):
            if m.get("method") == method and m.get("sessionId") == session:
                return self._events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method and m.get("sessionId") == session:
                return m
            self._events.append(m)

    # -- one page ---------------------------------------------------------------------------
    def check(
        self,
        path: str | Path,
        *,
        width: int = 1280,
        height: int = 900,
        screenshot: bool = False,
        shot_height: int | None = None,
    ) -> PageCheck:
        """Open ``path`` at ``width`` × ``height`` CSS px and measure it (:data:`LAYOUT_JS`),
        collecting console errors, uncaught exceptions and browser log errors."""
        url = Path(path).resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for dom in ("Page.enable", "Runtime.enable", "Log.enable"):
                self.send(dom, session=sid)
            self.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=sid,
            )
            self.send("Page.navigate", {"url": url}, session=sid)
            self._wait_event("Page.loadEventFired", sid)
            res = self.send(
                "Runtime.evaluate",
                {"expression": LAYOUT_JS, "returnByValue": True, "awaitPromise": True},
                session=sid,
            )
            if "exceptionDetails" in res:
                raise BrowserError(f"layout script failed: {res['exceptionDetails']}")
            layout = res["result"]["value"]
            png = None
            if screenshot:
                h = min(shot_height or layout["scrollHeight"], layout["scrollHeight"])
                shot = self.send(
                    "Page.captureScreenshot",
                    {
                        "format": "png",
                        "captureBeyondViewport": True,
                        "clip": {"x": 0, "y": 0, "width": width, "height": h, "scale": 1},
                    },
                    session=sid,
                )
                png = base64.b64decode(shot["data"])
            errors = self._console_errors(sid)
        finally:
            self.send("Target.closeTarget", {"targetId": target})
        return PageCheck(url=url, layout=layout, console_errors=errors, png=png)

    def _console_errors(self, sid: str) -> list[str]:
        out = []
        keep = []
        for m in self._events:
            if m.get("sessionId") != sid:
                keep.append(m)
                continue
            p = m.get("params", {})
            if m.get("method") == "Runtime.consoleAPICalled" and p.get("type") in (
                "error",
                "assert",
            ):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif m.get("method") == "Runtime.exceptionThrown":
                out.append(str(p.get("exceptionDetails", {}).get("text")))
            elif m.get("method") == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"{p['entry'].get('source')}: {p['entry'].get('text')}")
        self._events = keep
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900, help="window height (CSS px)")
    ap.add_argument("--png", type=Path, help="write a screenshot here")
    ap.add_argument("--shot-height", type=int, help="screenshot height (default: whole page)")
    a = ap.parse_args(argv)
    with Chromium() as br:
        res = br.check(
            a.report, width=a.width, height=a.height, screenshot=a.png is not None,
            shot_height=a.shot_height,
        )  # fmt: skip
    if a.png is not None and res.png is not None:
        a.png.write_bytes(res.png)
    print(json.dumps({"layout": res.layout, "console_errors": res.console_errors}, indent=2))
    probs = res.problems()
    for p in probs:
        print("FAIL:", p, file=sys.stderr)
    return 1 if probs else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
