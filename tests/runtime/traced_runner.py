"""An actor process that keeps its spans in the SDK's in-memory exporter and writes them
as JSON when it stops: ``python -m tests.runtime.traced_runner TEAM ROLE[,ROLE] SPANS``.

Otherwise it is ``tests.durability.runner`` (settings from the environment, ``READY <pid>``
once serving, drains on SIGTERM).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import telemetry
from runtime.config import Settings

from ..durability import runner


def main(team_file: str, roles: list[str], spans_file: Path) -> None:
    exporter = InMemorySpanExporter()
    assert telemetry.configure(Settings(), exporter=exporter)
    try:
        anyio.run(runner.main, team_file, roles)
    finally:
        telemetry.flush()
        spans = [json.loads(span.to_json()) for span in exporter.get_finished_spans()]
        spans_file.write_text(json.dumps(spans))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","), Path(sys.argv[3]))
