"""Model-written code in the ``python`` tool, tried as a hostile program would: each
attempt is contained by the bubblewrap sandbox and the limits, and the worker is unharmed.

Real processes and a real bubblewrap (``.ci/run`` installs it; without it these skip),
nothing mocked.
"""

from __future__ import annotations

import platform
import re
import secrets
import tempfile
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from runtime.tools import (
    PythonRunner,
    StepContext,
    ToolArgumentsError,
    ToolError,
    current_step,
    step_cgroup_layout,
)

from ..needs import BWRAP

pytestmark = [pytest.mark.anyio, BWRAP]


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


async def _at_least(marker: str, count: int) -> bool:
    """True once ``count`` processes carry ``marker`` (another step's, seen from the host)."""
    with anyio.move_on_after(30):
        while len(_processes_with(marker)) < count:  # noqa: ASYNC110 - not our children
            await anyio.sleep(0.05)
    return len(_processes_with(marker)) >= count


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


# --- one step against another ------------------------------------------------------------

_KEYRING_CALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}  # add_key, keyctl
_KEYRING = """\
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, KEYCTL = {calls}[platform.machine()]
USER_KEYRING, SEARCH, READ, SET_TIMEOUT, REVOKE = -4, 10, 11, 15, 3
"""


async def test_a_key_one_step_stores_is_not_there_for_a_later_step() -> None:
    """The kernel keeps a user's keyring after its processes end: a key stored by one step
    of the sandbox user would be readable by the next step (another run, another tenant)."""
    secret, name = secrets.token_hex(8), f"plancast-test-{secrets.token_hex(4)}"
    prelude = _KEYRING.format(calls=_KEYRING_CALLS)
    store = (prelude + f"key = libc.syscall(ADD_KEY, b'user', b'{name}', b'{secret}', 16, "
             "USER_KEYRING)\n"
             "if key > 0:\n"
             "    libc.syscall(KEYCTL, SET_TIMEOUT, key, 60)  # never outlives the test\n"
             "print('stored' if key > 0 else f'refused {ctypes.get_errno()}')\n")
    fetch = (prelude + f"key = libc.syscall(KEYCTL, SEARCH, USER_KEYRING, b'user', b'{name}', 0)\n"
             "buffer = ctypes.create_string_buffer(64)\n"
             "size = libc.syscall(KEYCTL, READ, key, buffer, 64) if key > 0 else -1\n"
             "if key > 0:\n"
             "    libc.syscall(KEYCTL, REVOKE, key)\n"
             "print(buffer.raw[:size].decode() if size > 0 else 'nothing')\n")
    runner = PythonRunner()
    stored = await runner.run({"code": store})
    fetched = await runner.run({"code": fetch})
    assert secret not in fetched, f"the later step read the key ({stored.strip()})"
    assert stored.strip() == "refused 1" and fetched.strip() == "nothing"


_NAMESPACE_ATTEMPTS = {
    "unshare -U": "made = run(['unshare', '-U', 'true']).returncode == 0",
    "unshare -Urm": "made = run(['unshare', '-Urm', 'true']).returncode == 0",
    "unshare(CLONE_NEWUSER)": "made = in_child(lambda: libc.unshare(NEWUSER))",
    "unshare(CLONE_NEWUSER | CLONE_NEWNS)":
        "made = in_child(lambda: libc.unshare(NEWUSER | NEWNS))",
    "clone(CLONE_NEWUSER)":
        "made = in_child(lambda: libc.syscall(CLONE, NEWUSER | 17, 0, 0, 0, 0), clones=True)",
}


@pytest.mark.parametrize("attempt", list(_NAMESPACE_ATTEMPTS))
async def test_it_cannot_make_user_or_mount_namespaces(attempt: str) -> None:
    """A user namespace would give the program capabilities over what it creates next
    (mount namespaces, mounts): the kernel's attack surface a sandbox keeps closed."""
    code = ("import ctypes, os, subprocess\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def run(argv):\n"
            "    return subprocess.run(argv, capture_output=True)\n"
            f"NEWUSER, NEWNS, CLONE = 0x10000000, 0x20000, {56 if _x86() else 220}\n"
            "def in_child(call, clones=False):\n"
            "    pid = 0 if clones else os.fork()\n"
            "    if pid == 0:\n"
            "        result = call()\n"
            "        if not clones:\n"
            "            os._exit(0 if result == 0 else 1)\n"
            "        if result == 0:  # the clone's child\n"
            "            os._exit(0)\n"
            "        if result < 0:\n"
            "            return False\n"
            "        pid = result\n"
            "    return os.waitpid(pid, 0)[1] == 0\n"
            f"{_NAMESPACE_ATTEMPTS[attempt]}\n"
            "print('made' if made else 'refused')\n")
    out = await PythonRunner().run({"code": code})
    assert out.splitlines()[-1] == "refused", out


def _x86() -> bool:
    return platform.machine() == "x86_64"


async def test_threads_and_subprocesses_still_work_under_the_filter() -> None:
    """clone3 answers ENOSYS, so the C library falls back to clone for threads and spawns."""
    code = ("import subprocess, sys, threading\n"
            "seen = []\n"
            "thread = threading.Thread(target=seen.append, args=['thread'])\n"
            "thread.start(); thread.join()\n"
            "child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True)\n"
            "print(seen[0], child.stdout.decode().strip())\n")
    assert await PythonRunner().run({"code": code}) == "thread 42\n"


needs_step_cgroups = pytest.mark.skipif(
    step_cgroup_layout() is None,
    reason="no cgroup for steps here: the fallback limits per process (see step_cgroup.py)")


@needs_step_cgroups
async def test_a_fork_bomb_in_one_step_does_not_fail_another_step_running_at_once() -> None:
    marker = f"plancast-test-{secrets.token_hex(6)}"
    bomb = ("import os, time\n"
            "while True:\n"
            "    try:\n"
            "        os.fork()\n"
            "    except OSError:\n"
            "        time.sleep(0.01)\n")
    bombing = ("import os, sys\n"  # the marker in every command line, to count them
               f"os.execv(sys.executable, [sys.executable, '-c', {bomb!r}, {marker!r}])")
    forking = ("import os\n"
               "children = []\n"
               "for _ in range(5):\n"
               "    pid = os.fork()\n"
               "    if pid == 0:\n"
               "        os._exit(0)\n"
               "    children.append(pid)\n"
               "print(sum(os.waitpid(pid, 0)[1] == 0 for pid in children), 'children ran')\n")
    runner = PythonRunner(max_processes=32)  # the same limits for every step, as in a team
    with anyio.fail_after(90):
        async with anyio.create_task_group() as steps:
            steps.start_soon(runner.run, {"code": bombing, "timeout": 60})
            assert await _at_least(marker, 28), "the fork bomb never filled its step"
            assert await runner.run({"code": forking}) == "5 children ran\n"
            steps.cancel_scope.cancel()
    assert await _gone(marker)


@needs_step_cgroups
async def test_memory_is_limited_for_the_step_as_a_whole() -> None:
    """Four processes each under the per-process limit cannot together hold four times it."""
    code = ("import os\n"
            "release_r, release_w = os.pipe()\n"
            "children = []\n"
            "for _ in range(4):\n"
            "    r, w = os.pipe()\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        os.close(release_w)\n"
            "        data = b'x' * (150 * 1024 * 1024)  # written: every page is charged\n"
            "        os.write(w, b'1')\n"
            "        os.read(release_r, 1)  # held until the parent has counted\n"
            "        os._exit(0)\n"
            "    os.close(w)\n"
            "    children.append((pid, r))\n"
            "ready = [pid for pid, r in children if os.read(r, 1) == b'1']\n"
            "# ready and still alive: holding its memory now (a killed one wrote first)\n"
            "holding = [pid for pid in ready if os.waitpid(pid, os.WNOHANG) == (0, 0)]\n"
            "print(len(holding), 'of 4 held at once')\n")
    try:
        out = await PythonRunner(memory_mb=256).run({"code": code, "timeout": 60})
    except ToolError as exc:  # the kernel may pick the parent to kill
        assert "memory limit of 256 MB" in str(exc)
    else:
        held = re.fullmatch(r"(\d) of 4 held at once\n", out)
        assert held is not None and int(held[1]) <= 1, out


@needs_step_cgroups
async def test_a_step_leaves_no_cgroup_behind() -> None:
    layout = step_cgroup_layout()
    assert layout is not None
    before = {p for parent in layout.parents for p in parent.glob("plancast-step-*")}
    runner = PythonRunner()
    assert await runner.run({"code": "print('ok')"}) == "ok\n"
    with anyio.fail_after(30), pytest.raises(ToolError, match="timed out"):
        await runner.run({"code": "import os\nos.fork()\nwhile True: pass", "timeout": 1})
    after = {p for parent in layout.parents for p in parent.glob("plancast-step-*")}
    assert after <= before
