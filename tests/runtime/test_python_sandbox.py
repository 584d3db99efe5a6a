"""Model-written code in the ``python`` tool, tried as a hostile program would: each
attempt is contained by the bubblewrap sandbox and the limits, and the worker is unharmed.

Real processes and a real bubblewrap (``.ci/run`` installs it), nothing mocked.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from runtime.errors import ToolArgumentsError, ToolError
from runtime.tools import PythonRunner
from runtime.tools.context import StepContext, current_step

pytestmark = pytest.mark.anyio


def _processes_with(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (and that are not zombies)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes() \
                    and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX":
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def _gone(marker: str) -> bool:
    """True once no process carries ``marker`` (the kernel reaps a namespace at once, but
    on a loaded machine the last one may take a moment to disappear from /proc)."""
    with anyio.move_on_after(10):
        while _processes_with(marker):  # noqa: ASYNC110 - not our children: nothing to await
            await anyio.sleep(0.05)
    return not _processes_with(marker)


async def test_it_sees_none_of_the_workers_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the worker's")
    in_home = Path.home() / f".plancast-test-{secrets.token_hex(4)}"
    in_home.write_text("the worker's credentials")
    try:
        code = ("def seen(path):\n"
                "    try:\n"
                "        return 'worker' in open(path, errors='replace').read()\n"
                "    except OSError:\n"
                "        return False\n"
                f"for path in [{str(secret)!r}, {str(in_home)!r}, '/etc/passwd', "
                f"{str(Path.cwd() / 'README.md')!r}, '/proc/1/environ']:\n"
                "    print(path, seen(path))\n")
        out = await PythonRunner().run({"code": code})
    finally:
        in_home.unlink()
    assert "True" not in out and out.count("False") == 5, out


async def test_it_writes_only_in_its_own_directory(tmp_path: Path) -> None:
    code = ("import os\n"
            "open('mine.txt', 'w').write('ok')\n"
            f"for path in ['/usr/x', '/etc/x', {str(tmp_path / 'x')!r}, '/root/x']:\n"
            "    try:\n"
            "        open(path, 'w').write('escaped')\n"
            "        print('wrote', path)\n"
            "    except OSError as exc:\n"
            "        print('refused', type(exc).__name__)\n"
            "print(os.getcwd(), sorted(os.listdir('.')))\n")
    out = await PythonRunner().run({"code": code})
    assert "wrote" not in out and out.count("refused") == 4, out
    assert not (tmp_path / "x").exists()
    assert "/work ['main.py', 'mine.txt']" in out


def _workdirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("plancast-python-*"))


async def test_each_run_starts_clean_and_leaves_nothing_behind() -> None:
    before = await anyio.to_thread.run_sync(_workdirs)
    runner = PythonRunner()
    await runner.run({"code": "open('left.txt', 'w').write('x')"})
    assert (await runner.run({"code": "import os; print(sorted(os.listdir('.')))"})).strip() \
        == "['main.py']"
    assert await anyio.to_thread.run_sync(_workdirs) <= before


async def test_it_has_no_network(nats_url: str) -> None:
    port = int(nats_url.rsplit(":", 1)[1])  # a real server the worker can reach
    code = ("import socket\n"
            f"for host in ['127.0.0.1', '10.0.0.1', 'example.com']:\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), 2).close()\n"
            "        print('connected', host)\n"
            "    except OSError as exc:\n"
            "        print('no', host, type(exc).__name__)\n")
    out = await PythonRunner().run({"code": code})
    assert "connected" not in out and out.count("no ") == 3, out


async def test_no_stdin_and_none_of_the_workers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-the-child")
    code = "import os, sys\nprint(repr(sys.stdin.read()), sorted(os.environ))"
    out = await PythonRunner().run({"code": code})
    assert out.strip() == "'' ['HOME', 'LANG', 'PATH', 'PWD', 'TMPDIR']"


async def test_a_child_that_outlives_the_timeout_is_killed() -> None:
    marker = f"plancast-test-{secrets.token_hex(6)}"
    sleeper = f"[sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}]"
    code = ("import os, subprocess, sys, time\n"
            "if os.fork() == 0:\n"  # a daemon: its own session, away from the group
            "    os.setsid()\n"
            f"    subprocess.Popen({sleeper})\n"
            "    time.sleep(60)\n"
            f"subprocess.Popen({sleeper})\n"
            "while True: time.sleep(1)\n")
    with anyio.fail_after(60), pytest.raises(ToolError, match="timed out after 3 s"):
        await PythonRunner().run({"code": code, "timeout": 3})
    assert await _gone(marker)


async def test_a_fork_bomb_is_contained_and_the_worker_goes_on() -> None:
    marker = f"plancast-test-{secrets.token_hex(6)}"
    code = (f"import os, time  # {marker}\n"
            "n = 0\n"
            "while True:\n"
            "    try:\n"
            "        os.fork(); n += 1\n"
            "    except OSError:\n"
            "        time.sleep(0.01)\n")
    runner = PythonRunner(max_processes=32)
    with anyio.fail_after(60), pytest.raises(ToolError, match="timed out after 3 s"):
        await runner.run({"code": code, "timeout": 3})
    assert await _gone(marker)
    assert await runner.run({"code": "print('still here')"}) == "still here\n"


async def test_memory_past_the_limit_fails_the_program_only() -> None:
    with pytest.raises(ToolError, match="MemoryError"):
        await PythonRunner(memory_mb=256).run({"code": "x = bytearray(512 * 1024 * 1024)"})
    assert await PythonRunner().run({"code": "print(1)"}) == "1\n"


async def test_without_bubblewrap_it_refuses_unless_the_team_says_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolError, match=r"bubblewrap.*sandbox = \"none\""):
        await PythonRunner().run({"code": "print(1)"})
    assert await PythonRunner(sandbox="none").run({"code": "print(1)"}) == "1\n"


async def test_step_outputs_are_bound_as_data_never_spliced_into_the_program() -> None:
    hostile = '"""\nimport os; print("INJECTED")\n"""'  # closes any string it lands in
    step = StepContext("r", 3, 1, 1, "calc/x", inputs={1: hostile, 2: "2"})
    token = current_step.set(step)
    try:
        runner = PythonRunner()
        code = "text = $1\nprint(len(text), int(${2}) + 1)  # $1 here stays a comment\n"
        assert await runner.run({"code": code}) == f"{len(hostile)} 3\n"
        assert await runner.run({"code": 'print("$2" == $2)'}) == "True\n"
        for spliced in ('print("costs: $1")', "print(f'{$1}x')", 'x = """$1 and more"""'):
            with pytest.raises(ToolArgumentsError, match="inside a longer string"):
                await runner.run({"code": spliced})
        with pytest.raises(ToolArgumentsError, match=r"steps \[7\]"):
            await runner.run({"code": "print($7)"})
        with pytest.raises(ToolError, match='line 2'):  # as written, before the bound inputs
            await runner.run({"code": "x = $2\nraise ValueError(x)"})
    finally:
        current_step.reset(token)
