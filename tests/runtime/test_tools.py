"""The tool interface, the registry and each built-in tool, run for real (no mocks of I/O)."""

from __future__ import annotations

import collections
import ctypes
import logging
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.tools import (
    ENTRY_POINT_GROUP,
    EXPRESSION_PATTERN,
    EchoArgs,
    FunctionTool,
    HttpGetTool,
    MathTool,
    PythonRunner,
    ReadFileTool,
    Tool,
    ToolArgumentsError,
    ToolError,
    ToolInputError,
    ToolRegistry,
    UnknownTool,
    builtin_tools,
    echo_tool,
    evaluate,
    sleep_tool,
    tool,
)

from ..needs import BWRAP

pytestmark = pytest.mark.anyio


# --- python --------------------------------------------------------------------------------


@BWRAP
async def test_python_returns_stdout() -> None:
    assert await PythonRunner().run({"code": "print(6 * 7)"}) == "42\n"


@BWRAP
async def test_python_nonzero_exit_is_a_tool_error_with_the_traceback() -> None:
    with pytest.raises(ToolError, match="exited with code 1") as info:
        await PythonRunner().run({"code": "x = 1\nraise ValueError('boom')"})
    assert "ValueError: boom" in str(info.value)
    assert 'File "main.py", line 2' in str(info.value)


@BWRAP
async def test_python_leftover_children_do_not_hold_up_the_result() -> None:
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('done')\n"
    )
    with anyio.fail_after(15):
        assert await PythonRunner().run({"code": code, "timeout": 30}) == "done\n"


@BWRAP
async def test_python_timeout_is_capped_by_max_timeout() -> None:
    with anyio.fail_after(30), pytest.raises(ToolError, match=r"timed out after 0\.5 s"):
        await PythonRunner(max_timeout=0.5).run({"code": "while True: pass", "timeout": 30})


@BWRAP
async def test_python_memory_limit() -> None:
    with pytest.raises(ToolError, match="MemoryError"):
        await PythonRunner(memory_mb=256).run({"code": "data = bytearray(2 * 1024**3)"})


@BWRAP
async def test_python_output_is_truncated_and_says_so() -> None:
    out = await PythonRunner(max_output_bytes=1000).run({"code": "print('x' * 5000)"})
    assert out.startswith("x" * 1000)
    assert "stdout truncated: 4001 last bytes dropped" in out
    assert len(out) < 1200


@BWRAP
async def test_python_keeps_the_tail_of_a_long_stderr() -> None:
    code = "import sys\nsys.stderr.write('noise\\n' * 10000)\nraise RuntimeError('the end')"
    with pytest.raises(ToolError) as info:
        await PythonRunner(max_output_bytes=500).run({"code": code})
    assert "RuntimeError: the end" in str(info.value)
    assert "stderr truncated" in str(info.value)
    assert len(str(info.value)) < 1000


@BWRAP
async def test_python_success_includes_stderr() -> None:
    code = "import sys\nprint('out')\nprint('warn', file=sys.stderr)"
    assert await PythonRunner().run({"code": code}) == "out\n\n[stderr]\nwarn\n"


async def test_without_bubblewrap_it_refuses_unless_the_team_says_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolError, match=r"bubblewrap.*sandbox = \"none\""):
        await PythonRunner().run({"code": "print(1)"})
    assert await PythonRunner(sandbox="none").run({"code": "print(1)"}) == "1\n"


# --- math ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 100", str(2**100)),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("-3 + +2", "-1"),
        ("10 / 4", "2.5"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** -1", "0.5"),
        ("sqrt(16)", "4"),
        ("max(1, 5, 3) - min(4, 2)", "3"),
        ("round(2.567, 2)", "2.57"),
        ("abs(-3)", "3"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("cos(0) + sin(0) + exp(0)", "2"),
        ("round(pi, 5)", "3.14159"),
        (" 1e3 ", "1000"),
    ],
)
async def test_math_results(expression: str, expected: str) -> None:
    assert await MathTool().run({"expression": expression}) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "'__import__' is not allowed; allowed: abs, round"),
        ("x + 1", "unknown name 'x'"),
        ("(1).real", "Attribute is not allowed"),
        ("().__class__", "Attribute is not allowed"),
        ("9**9**9", "too large"),
        ("10 ** 100000", "too large"),
        ("(10**3000) * (10**3000)", "too large"),
        ("2.0 ** 10000", "too large"),
        ("exp(1000)", "too large"),
        ("1e308 * 10", "not finite"),
        ("1 / 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** 0.5", "not a real number"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "booleans"),
        ("[1, 2]", "List is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("round(x=1)", "takes no keyword arguments"),
        ("round(1, -10**8)", "at most 4000 digits"),
        ("1 +", "not an arithmetic expression"),
        ("1 + " * 300 + "1", "longer than 1000"),
    ],
)
async def test_math_refuses(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        await MathTool().run({"expression": expression})


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("3^2", "`^` is not an operator here; use `**` for powers"),
        ("{12 + 5} * {", "use ( ) for grouping, not { }"),
        ("Math.sqrt()}},{", "use ( ) for grouping, not { }"),
        ("Math.sqrt(16)", "'Math.sqrt' is not allowed: write 'sqrt' alone"),
        ("num + 2*n**3", "unknown name 'num'; only pi, e are defined: write the number"),
        ("PI * 2", "unknown name 'PI'; write 'pi'"),
        ("pow(2, 10)", "function 'pow' is not allowed; use `**` for powers"),
        ("2(3 + 4)", "write `*` between a number and `(`"),
        ("sqrt(2, 3)", "sqrt takes one argument: sqrt(x)"),
        ("1,000", "1000, not 1,000"),
        ("12 * 12 = 144", "write only the expression, without ="),
        ("3 > 2", "comparisons are not arithmetic"),
        ("5!", "write the product"),
    ],
)
async def test_math_errors_name_the_piece_and_the_fix(expression: str, message: str) -> None:
    """The arguments' fault, said so that a replan can fix it: and not retried as is."""
    with pytest.raises(ToolInputError, match=re.escape(message)) as caught:
        await MathTool().run({"expression": expression})
    assert isinstance(caught.value, ToolArgumentsError)  # the executor's "permanent"
    assert "BinOp" not in str(caught.value)


async def test_math_failures_of_the_values_are_no_input_errors() -> None:
    with pytest.raises(ToolError, match="division by zero") as caught:
        await MathTool().run({"expression": "7 / 0"})
    assert not isinstance(caught.value, ToolArgumentsError)


@given(st.integers(-(10**30), 10**30), st.integers(-(10**30), 10**30))
def test_math_integer_arithmetic_is_exact(a: int, b: int) -> None:
    assert evaluate(f"{a} * {b} - ({b})") == a * b - b


# --- read_file -----------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> ReadFileTool:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.txt").write_bytes(b"beta \xff")
    (root / "big.txt").write_text("x" * 101)
    (tmp_path / "secret.txt").write_text("secret")
    (root / "escape").symlink_to(tmp_path / "secret.txt")
    (root / "escape_dir").symlink_to(tmp_path)
    (root / "inside_link").symlink_to(root / "a.txt")
    (root / "relative_link").symlink_to("sub/b.txt")
    (root / "sub_link").symlink_to("sub")
    (root / "loop").symlink_to("loop")
    return ReadFileTool(root, max_bytes=100)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a.txt", "alpha"),
        ("sub/../a.txt", "alpha"),
        ("sub/b.txt", "beta \ufffd"),
        ("inside_link", "alpha"),
        ("relative_link", "beta \ufffd"),
        ("sub_link/../sub_link/b.txt", "beta \ufffd"),
    ],
)
async def test_read_file_inside_root(files: ReadFileTool, path: str, expected: str) -> None:
    assert await files.run({"path": path}) == expected


async def test_read_file_absolute_path_inside_root_is_fine(files: ReadFileTool) -> None:
    assert await files.run({"path": str(files.root / "a.txt")}) == "alpha"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../secret.txt", "outside"),
        ("sub/../../secret.txt", "outside"),
        ("/etc/passwd", "outside"),
        ("escape", "outside"),
        ("escape_dir/secret.txt", "outside"),
        ("big.txt", "101 bytes; the limit is 100"),
        ("missing.txt", "no such file"),
        ("sub", "not a regular file"),
        ("a\x00b", "NUL"),
        ("loop", "more than 40 symbolic links"),
        ("a.txt/x", "'a.txt' is not a directory"),
    ],
)
async def test_read_file_refuses(files: ReadFileTool, path: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await files.run({"path": path})


@pytest.mark.parametrize("path", ["proc/self/environ", "proc/1/cmdline", "sys/kernel/hostname",
                                  "dev/zero"])
async def test_read_file_refuses_kernel_files_even_under_a_root_that_holds_them(
    path: str
) -> None:
    with pytest.raises(ToolError, match="a kernel file system"):
        await ReadFileTool("/").run({"path": path})


class _Swapper(threading.Thread):
    """Swaps ``root/d`` between a real directory and a symlink to ``/`` until stopped: the
    position of a participant who may write under ``files_root``."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.stop = threading.Event()
        self.swaps = 0
        (root / "d" / "etc").mkdir(parents=True)
        (root / "d" / "etc" / "passwd").write_text("inside")
        (root / "d.link").symlink_to("/")

    def run(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        at_cwd, rename_exchange = -100, 2
        d, link = bytes(self.root / "d"), bytes(self.root / "d.link")
        while not self.stop.is_set():  # each exchange is atomic: d is always there
            if libc.renameat2(at_cwd, d, at_cwd, link, rename_exchange) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            self.swaps += 1


async def test_read_file_never_follows_a_directory_swapped_for_a_symlink(
    tmp_path: Path,
) -> None:
    """A real race: while one thread swaps a directory under the root for a symlink to
    ``/``, thousands of reads of ``d/etc/passwd`` return the file inside or a refusal, never
    the machine's /etc/passwd and never an uncaught error."""
    files = ReadFileTool(tmp_path)  # the default size limit: /etc/passwd would fit
    swapper = _Swapper(files.root)
    seen: collections.Counter[str] = collections.Counter()
    uncaught: list[str] = []

    async def read_many(times: int) -> None:
        for _ in range(times):
            try:
                text = await files.run({"path": "d/etc/passwd"})
            except ToolError:
                seen["refused"] += 1
            except Exception as exc:  # what the model would see as a crashed tool
                uncaught.append(f"{type(exc).__name__}: {exc}")
            else:
                seen["inside" if text == "inside" else "outside"] += 1

    swapper.start()
    try:
        async with anyio.create_task_group() as readers:
            for _ in range(4):
                readers.start_soon(read_many, 2500)
    finally:
        swapper.stop.set()
        swapper.join()
    assert swapper.swaps > 0 and seen["inside"] > 0 and seen["refused"] > 0  # it raced
    assert seen["outside"] == 0, f"{seen['outside']} reads returned a file outside the root"
    assert uncaught == [], f"{len(uncaught)} uncaught errors, e.g. {uncaught[:3]}"


# --- http_get ------------------------------------------------------------------------------


LOCAL = ["127.0.0.1"]
"""The test servers listen on loopback, which a model may not reach unless allowed."""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/to/"):  # a redirect to the URL after /to/
            self.send_response(302)
            self.send_header("Location", self.path[len("/to/"):])
            self.end_headers()
            return
        routes = {"/hello": (200, "héllo world".encode()), "/big": (200, b"y" * 100_000)}
        status, body = routes.get(self.path, (404, b"nothing here"))
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading at its limit

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_http_get_returns_status_and_body(http_url: str) -> None:
    out = await HttpGetTool(allow=LOCAL).run({"url": f"{http_url}/hello"})
    assert out == "HTTP 200 OK\n\nhéllo world"


async def test_http_get_returns_error_statuses_too(http_url: str) -> None:
    out = await HttpGetTool(allow=LOCAL).run({"url": f"{http_url}/nope"})
    assert out == "HTTP 404 Not Found\n\nnothing here"


async def test_http_get_truncates_at_max_bytes(http_url: str) -> None:
    out = await HttpGetTool(max_bytes=1000, allow=LOCAL).run({"url": f"{http_url}/big"})
    assert out.startswith("HTTP 200 OK\n\n" + "y" * 1000 + "\n[truncated")
    assert "y" * 1001 not in out


async def test_http_get_times_out_on_a_server_that_never_answers() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # connections complete in the backlog, and nobody ever reads
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
        with anyio.fail_after(10), pytest.raises(ToolError, match=r"timed out after 0\.5 s"):
            await HttpGetTool(timeout=0.5, allow=LOCAL).run({"url": url})


async def test_http_get_reports_a_refused_connection() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ToolError, match="failed: ConnectError"):
        await HttpGetTool(allow=LOCAL).run({"url": f"http://127.0.0.1:{port}/"})


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:alert(1)", "/relative"]
)
async def test_http_get_refuses_other_schemes(url: str) -> None:
    with pytest.raises(ToolError, match="only http:// and https://"):
        await HttpGetTool(allow=LOCAL).run({"url": url})


@pytest.mark.parametrize("host", [
    "127.0.0.1", "localhost", "10.1.2.3", "192.168.0.1", "169.254.169.254", "[::1]",
    "[::ffff:127.0.0.1]", "0.0.0.0", "100.64.0.1", "[fd00::1]",
])
async def test_http_get_refuses_addresses_only_the_worker_should_reach(host: str) -> None:
    with pytest.raises(ToolError, match=r"refused: .* add it to http_allow"):
        await HttpGetTool(timeout=3).run({"url": f"http://{host}:9/"})


@pytest.mark.parametrize("host", [
    "[::7f00:1]", "[::127.0.0.1]", "[::a9fe:a9fe]",  # IPv4-compatible
    "[::ffff:0:7f00:1]",  # IPv4-translated (SIIT)
    "[64:ff9b::7f00:1]", "[64:ff9b::10.0.0.1]", "[64:ff9b::a9fe:a9fe]",  # NAT64
    "[64:ff9b:1::7f00:1]", "[64:ff9b:1:7f00:0:100::]",  # local-use NAT64, any layout
    "[2002:7f00:1::1]", "[2002:a9fe:a9fe::]", "[2002:c0a8:1:1::1]",  # 6to4
    "[2001:0:4136:e378:8000:63bf:80ff:fffe]",  # Teredo, client 127.0.0.1 (bits inverted)
    "[2001:0:a00:1::f5ff:fffe]",  # Teredo, server 10.0.0.1
    "[2600::5efe:7f00:1]", "[2600::200:5efe:a9fe:a9fe]",  # ISATAP interface ids
])
async def test_http_get_refuses_ipv6_spellings_of_a_forbidden_ipv4_address(host: str) -> None:
    with pytest.raises(ToolError, match=r"refused: .* add it to http_allow"):
        await HttpGetTool(timeout=3).run({"url": f"http://{host}:9/"})


async def test_http_get_allows_what_the_team_allows_in_any_spelling(http_url: str) -> None:
    """``http_allow`` names the IPv4 address; its IPv4-mapped spelling reaches it too."""
    port = http_url.rsplit(":", 1)[1]
    out = await HttpGetTool(allow=LOCAL).run({"url": f"http://[::ffff:127.0.0.1]:{port}/hello"})
    assert out == "HTTP 200 OK\n\nhéllo world"


async def test_http_get_checks_every_redirect(http_url: str) -> None:
    """An allowed host that redirects to one that is not: refused at the redirect."""
    port = http_url.rsplit(":", 1)[1]
    hop = f"http://localhost:{port}/to/http://127.0.0.1:{port}/hello"
    with pytest.raises(ToolError, match=r"127\.0\.0\.1 is 127\.0\.0\.1"):
        await HttpGetTool(allow=["localhost"]).run({"url": hop})
    out = await HttpGetTool(allow=["localhost", "127.0.0.1"]).run({"url": hop})
    assert out == "HTTP 200 OK\n\nhéllo world"


# --- echo, sleep, the decorator ------------------------------------------------------------


async def test_echo_and_sleep() -> None:
    assert await echo_tool.run({"text": "hi"}) == "hi"
    assert await sleep_tool.run({"seconds": 0.01}) == "slept 0.01 s"
    with pytest.raises(ToolArgumentsError, match="<= 60"):
        await sleep_tool.run({"seconds": 1000})


class _AddArgs(msgspec.Struct, forbid_unknown_fields=True):
    a: int
    b: int = 0


async def test_tool_decorator_builds_a_tool_from_a_function() -> None:
    @tool(name="add")
    async def add(args: _AddArgs) -> str:
        """Add two integers."""
        return str(args.a + args.b)

    assert isinstance(add, FunctionTool) and isinstance(add, Tool)
    assert add.description == "Add two integers."
    assert add.parameters["required"] == ["a"]
    assert await add.run({"a": 2, "b": 3}) == "5"


def test_tool_decorator_needs_a_struct_argument() -> None:
    async def bad(text: str) -> str:
        return text

    with pytest.raises(TypeError, match=r"one msgspec\.Struct argument"):
        tool(name="bad")(bad)  # type: ignore[type-var]


# --- registry ------------------------------------------------------------------------------


def test_builtin_tools(tmp_path: Path) -> None:
    assert builtin_tools(plugins=False).names() == ["echo", "http_get", "math", "python", "sleep"]
    assert "read_file" in builtin_tools(files_root=tmp_path, plugins=False)


def test_unknown_tool_lists_the_known_ones() -> None:
    with pytest.raises(UnknownTool, match="no tool named 'bash'; known tools: echo, http_get"):
        builtin_tools(plugins=False).get("bash")


def test_subset() -> None:
    tools = builtin_tools(plugins=False)
    assert tools.subset(["math", "echo", "math"]).names() == ["echo", "math"]
    assert len(tools.subset([])) == 0
    with pytest.raises(UnknownTool, match="'nope'"):
        tools.subset(["math", "nope"])


def test_openai_spec_shape() -> None:
    specs = builtin_tools(plugins=False).specs(["math", "python"])
    assert [spec["function"]["name"] for spec in specs] == ["math", "python"]
    math_spec = specs[0]
    assert math_spec["type"] == "function"
    assert set(math_spec["function"]) == {"name", "description", "parameters"}
    assert math_spec["function"]["parameters"] == {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": _description(math_spec),
                                      "pattern": EXPRESSION_PATTERN}},
        "required": ["expression"],
        "additionalProperties": False,
    }
    assert MathTool().openai_spec() == math_spec
    assert "$ref" not in str(specs)


def _description(spec: dict[str, Any]) -> str:
    return str(spec["function"]["parameters"]["properties"]["expression"]["description"])


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "missing required field `expression`"),
        ({"expression": 1}, "Expected `str`, got `int` - at `$.expression`"),
        ({"expression": "1", "extra": 2}, "unknown field `extra`"),
        ([], "Expected `object`, got `array`"),
    ],
)
async def test_bad_arguments(args: Any, problem: str) -> None:
    with pytest.raises(ToolArgumentsError) as info:
        await builtin_tools(plugins=False).run("math", args)
    message = str(info.value)
    assert problem in message
    assert "bad arguments for tool 'math'" in message
    assert message.endswith("It expects {expression: string (required)}")


def test_registry_refuses_duplicates_and_bad_names() -> None:
    tools = ToolRegistry([MathTool()])
    with pytest.raises(ValueError, match="already registered"):
        tools.add(MathTool())
    tools.add(MathTool(), replace=True)
    bad = FunctionTool(echo_tool.fn, name="has space", description="", args_type=EchoArgs)
    with pytest.raises(ValueError, match="must match"):
        tools.add(bad)


def test_plugins_load_and_failures_are_logged_and_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    group = ENTRY_POINT_GROUP
    points = [
        EntryPoint("calc", "runtime.tools.math_eval:MathTool", group),  # a factory (class)
        EntryPoint("shout", "tests.runtime.test_tools:SHOUT", group),  # an instance
        EntryPoint("broken", "no_such_plancast_plugin.tools:thing", group),
        EntryPoint("odd", "os:getcwd", group),  # a factory that does not make a Tool
        EntryPoint("echo", "runtime.tools.demo:echo_tool", group),  # a name already taken
    ]

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        return [point for point in points if point.group == group]

    monkeypatch.setattr("runtime.tools.registry.entry_points", fake_entry_points)
    with caplog.at_level(logging.WARNING, logger="runtime.tools.registry"):
        tools = builtin_tools()
    assert "shout" in tools
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("'broken'" in w and "ModuleNotFoundError" in w for w in warnings)
    assert any("'odd'" in w and "str is not a Tool" in w for w in warnings)
    assert any("'echo'" in w and "name is taken" in w for w in warnings)
    assert any("'math'" in w and "name is taken" in w for w in warnings)  # from "calc"
    assert tools.names() == ["echo", "http_get", "math", "python", "shout", "sleep"]


class _ShoutArgs(msgspec.Struct, forbid_unknown_fields=True):
    text: str


@tool(name="shout")
async def SHOUT(args: _ShoutArgs) -> str:  # upper case: an entry point target
    """Upper-case the text."""
    return args.text.upper()


async def test_registry_runs_a_tool() -> None:
    assert await ToolRegistry([SHOUT]).run("shout", {"text": "hi"}) == "HI"
