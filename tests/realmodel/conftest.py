"""The real local model (SmolLM2-135M on llama.cpp, the ``local`` extra): one server for
the session, started by the launcher ``plancast local-model`` uses.

Without the extra these tests skip, saying how to install it; CI installs it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.llama_server import INSTALL_HINT, LlamaServer, missing_packages

MISSING = missing_packages()
requires_local = pytest.mark.skipif(
    bool(MISSING), reason=f"needs the local extra ({', '.join(MISSING)} missing): {INSTALL_HINT}")
"""Skips a test where the local model server cannot run."""


@pytest.fixture(scope="session")
def local_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """One llama.cpp server with the shipped SmolLM2 for the session."""
    if MISSING:
        pytest.skip(f"needs the local extra ({', '.join(MISSING)} missing): {INSTALL_HINT}")
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServer(log_path=log) as server:
        yield server
