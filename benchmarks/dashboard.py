"""How fast the dashboard draws a large run, measured in the browser (headless Chromium).

    python -m benchmarks.dashboard [--steps 100,1000] [--rate 2000] [--json]

For each size, synthetic events of a finished run (a plan of N steps, each dispatched,
started, finished and its usage recorded) are served by a stand-in for the gateway (the
page's own files, its run list, the run's Server-Sent Events) on 127.0.0.1, and the page
measures itself with ``performance.now()`` (app.js ``perf``):

- replay: the run opened after it ended, all events at once. First paint: ms from the
  page's navigation to the first frame with the plan drawn; whole run: to the frame that
  drew its end.
- live: the same events sent ``--rate`` per second, in bursts of a tenth of a second, as a
  busy run sends them. Per event: the page's time applying events and drawing frames,
  divided by the events; the longest frame says whether it stayed responsive.

Shapes: ``fan-out-N`` is N-1 independent steps joined by one; ``layered-N`` is N steps in
layers of 50, each reading two steps of the layer before. Nothing here is a pass/fail
threshold: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

DASHBOARD = Path(__file__).resolve().parent.parent / "runtime" / "gateway" / "dashboard"
RUN = "bench-run"
TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}


def synthetic_events(shape: str, steps: int) -> list[dict[str, Any]]:
    """A finished run's events, as the gateway streams them (seq 1, 2, 3 ...)."""
    t0 = 1_700_000_000.0
    deps: dict[int, list[int]] = {}
    if shape == "fan-out":
        for i in range(1, steps):
            deps[i] = []
        deps[steps] = list(range(1, steps))
    else:
        width = 50
        for i in range(1, steps + 1):
            layer = (i - 1) // width
            base = (layer - 1) * width
            deps[i] = [] if layer == 0 else sorted({base + 1 + (i - 1) % width,
                                                     base + 1 + i % width})
    out: list[dict[str, Any]] = []

    def emit(kind: str, ts: float, **fields: Any) -> None:
        out.append({"type": kind, "run_id": RUN, "seq": len(out) + 1, "ts": ts, **fields})

    usage = {"calls": 1, "prompt_tokens": 100, "completion_tokens": 20, "cost_usd": 0.0,
             "estimated": False}
    emit("event.run.started", t0, goal=f"{shape} of {steps} steps", planner="bench")
    emit("event.plan.started", t0 + 0.01, round=0, model="scripted")
    for i in range(1, steps + 1):
        emit("event.step.planned", t0 + 0.02 + i * 0.001, round=0, step={
            "id": i, "role": "worker", "tool": "echo", "args": {"text": f"step {i}"},
            "depends_on": deps[i], "title": f"step number {i}"})
    emit("event.plan.finished", t0 + 0.05 + steps * 0.001, round=0, steps=steps)
    finished: dict[int, float] = {}
    for i in range(1, steps + 1):
        start = max([t0 + 0.1 + steps * 0.001, *(finished[d] for d in deps[i])]) + 0.01
        emit("event.step.dispatched", start, step_id=i, role="worker", attempt=1)
        emit("event.step.started", start + 0.01, step_id=i, attempt=1, executor="worker/1")
        finished[i] = start + 0.5 + (i % 7) * 0.1
        emit("event.usage", finished[i], source=f"step:{i}", usage=usage,
             total={**usage, "calls": i})
        emit("event.step.finished", finished[i], step_id=i, attempt=1, output=f"out {i}",
             executor="worker/1", duration=0.5)
    out.sort(key=lambda e: e["ts"])
    for n, event in enumerate(out, 1):
        event["seq"] = n
    end = max(finished.values()) + 1
    emit("event.run.finished", end, answer="done", usage={**usage, "calls": steps})
    return out


class Stub(BaseHTTPRequestHandler):
    """The gateway as far as the page needs it: its files, GET /runs, the run's events."""

    events: ClassVar[list[bytes]] = []
    rate: float = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/":
            return self._file(DASHBOARD / "index.html")
        if path.startswith("/dashboard/"):
            return self._file(DASHBOARD / path.removeprefix("/dashboard/"))
        if path == "/runs":
            return self._send(200, "application/json", b"[]")
        if path == f"/runs/{RUN}/events":
            return self._stream(int(self.headers.get("Last-Event-ID") or 0))
        return self._send(404, "application/json", b'{"error": "no such thing"}')

    def _file(self, path: Path) -> None:
        if not path.is_file():
            return self._send(404, "text/plain", b"")
        self._send(200, TYPES.get(path.suffix, "application/octet-stream"), path.read_bytes())

    def _send(self, status: int, media: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, after: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        pending = self.events[after:]
        burst = max(1, int(self.rate / 10)) if self.rate else len(pending)
        for i in range(0, len(pending), burst):
            self.wfile.write(b"".join(pending[i:i + burst]))
            self.wfile.flush()
            if self.rate:
                time.sleep(0.1)


@contextmanager
def serve(events: list[dict[str, Any]], rate: float) -> Iterator[str]:
    encoded = [f"id: {e['seq']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]
    handler = type("Handler", (Stub,), {"events": encoded, "rate": rate})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


PERF = "import('/dashboard/app.js').then((m) => ({...m.perf, steps: m.currentRun().steps.size}))"


def measure(browser: Any, shape: str, steps: int, rate: float) -> dict[str, Any]:
    events = synthetic_events(shape, steps)
    figures: dict[str, Any] = {"shape": f"{shape}-{steps}", "events": len(events)}
    for mode, pace in (("replay", 0.0), ("live", rate)):
        with serve(events, pace) as url:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/#{RUN}")
            page.wait_for_selector("#outcome.finished", timeout=600_000)
            perf = page.evaluate(PERF)
            page.close()
        assert perf["events"] == len(events) and perf["steps"] == steps, perf
        per_event = (perf["applyMs"] + perf["renderMs"]) / perf["events"]
        figures[mode] = {
            "first_paint_ms": round(perf["firstPaint"], 1),
            "whole_run_ms": round(perf["endPaint"], 1),
            "frames": perf["frames"],
            "per_event_ms": round(per_event, 3),
            "longest_frame_ms": round(perf["maxFrameMs"], 1),
            "longest_frame": perf["slowest"],
        }
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="100,1000", help="sizes, comma-separated")
    parser.add_argument("--rate", type=float, default=500, help="live events per second")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("needs playwright: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    chromium = shutil.which("chromium")
    if chromium is None:
        print("needs chromium: apt install chromium", file=sys.stderr)
        return 2
    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run"])
        for steps in (int(s) for s in args.steps.split(",")):
            for shape in ("fan-out", "layered"):
                results.append(measure(browser, shape, steps, args.rate))
                print(f"{results[-1]}", file=sys.stderr)
        browser.close()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("| run | events | replay: first paint | replay: whole run | live: per event "
          "| live: longest frame |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['shape']} | {r['events']} | {r['replay']['first_paint_ms']:.0f} ms | "
              f"{r['replay']['whole_run_ms']:.0f} ms | {r['live']['per_event_ms']:.3f} ms | "
              f"{r['live']['longest_frame_ms']:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
