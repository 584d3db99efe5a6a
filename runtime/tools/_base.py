"""What a tool is: a name, a description, a JSON Schema of its arguments and ``run``.

The schema is derived from a msgspec Struct per tool, so what the model is told and what
is checked before the tool runs can never drift apart. An argument's schema may be as
strict as JSON Schema says (``pattern``, ``enum``, bounds) and may hold a grammar of its
own (:data:`GRAMMAR_KEY`, GBNF): plan constraints use both, a model is shown neither
the grammar nor anything else that is only ours (:func:`public_schema`).
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, TypeVar, cast, get_type_hints, runtime_checkable

import msgspec

from .errors import ToolArgumentsError

A = TypeVar("A", bound=msgspec.Struct)

GRAMMAR_KEY = "x-gbnf"
"""The keyword of a string argument's schema that holds its grammar: GBNF text whose
``root`` is what the string may hold, and which may use (without defining) ``step-ref``
where a plan step may write a ``$N`` reference (never followed by a digit). Grammar-
constrained plans write only what it admits (``runtime.models.grammar``); servers that
take a schema get the schema's ``pattern``, so give one too where a regex can say it."""


@runtime_checkable
class Tool(Protocol):
    """Anything the runtime can call: tool steps call it directly, agent steps via a model."""

    @property
    def name(self) -> str:
        """What plans and models call it; ``^[a-zA-Z0-9_-]{1,64}$`` (the OpenAI rule)."""
        ...

    @property
    def description(self) -> str:
        """Shown to the model: what the tool does and what it returns."""
        ...

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON Schema of the arguments object."""
        ...

    async def run(self, args: dict[str, Any]) -> str:
        """Check ``args``, run, return text; raise ToolArgumentsError or ToolError."""
        ...


CheckHook = Callable[[str], Awaitable[str | None]]
"""A tool's optional ``check(key)``: the output of the call made under this idempotency key
if it was done, None if it was not (and will not be: see docs/tools.md). The executor asks
it, for a step whose effects are ``once``, before it acts where an earlier execution may
have; a tool without one is not run again there (the step fails ``outcome_unknown``)."""


def check_hook(tool: Tool) -> CheckHook | None:
    """The tool's ``check`` hook, if it has one."""
    check = getattr(tool, "check", None)
    return check if callable(check) else None


def openai_spec(tool: Tool) -> dict[str, Any]:
    """The entry for ``tools=[...]`` of the OpenAI chat completions API."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": public_schema(tool.parameters),
        },
    }


def public_schema(schema: Any) -> Any:
    """``schema`` without argument grammars (:data:`GRAMMAR_KEY`): what a server or a
    model is shown (a strict server refuses a keyword it does not know, and a grammar is
    long)."""
    if isinstance(schema, dict):
        if not _has_grammar(schema):
            return schema
        return {k: public_schema(v) for k, v in schema.items() if k != GRAMMAR_KEY}
    if isinstance(schema, list):
        return [public_schema(v) for v in schema]
    return schema


def _has_grammar(node: Any) -> bool:
    if isinstance(node, dict):
        return GRAMMAR_KEY in node or any(_has_grammar(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_grammar(v) for v in node)
    return False


@functools.cache
def args_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The Struct's JSON Schema inlined at the top (no ``$ref``), as tool APIs expect."""
    _, components = msgspec.json.schema_components([args_type], ref_template="#/$defs/{name}")
    schema = dict(components.pop(args_type.__name__))
    schema.pop("title", None)
    schema.pop("description", None)
    if components:
        schema["$defs"] = components
    return schema


def describe_args(schema: dict[str, Any]) -> str:
    """A one-line summary of an object schema for error messages: ``{code: string, ...}``."""
    required = set(schema.get("required", ()))
    parts = []
    for key, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf", [prop])
        kind = " | ".join(str(o.get("type", o.get("$ref", "any"))) for o in options)
        parts.append(f"{key}: {kind}" + (" (required)" if key in required else ""))
    return "{" + ", ".join(parts) + "}"


def parse_args(tool_name: str, args_type: type[A], args: Any) -> A:
    """Convert a JSON-like args object to ``args_type`` or raise a ToolArgumentsError."""
    try:
        return msgspec.convert(args, args_type)
    except msgspec.ValidationError as exc:
        expected = describe_args(args_schema(args_type))
        raise ToolArgumentsError(
            f"bad arguments for tool {tool_name!r}: {exc}. It expects {expected}"
        ) from None


class StructTool(ABC, Generic[A]):
    """Base for tools whose arguments are a msgspec Struct: subclasses implement ``call``."""

    name: str
    description: str
    args_type: type[A]
    """Struct the arguments object is converted to (use ``forbid_unknown_fields=True``)."""

    @property
    def parameters(self) -> dict[str, Any]:
        return args_schema(self.args_type)

    def openai_spec(self) -> dict[str, Any]:
        return openai_spec(self)

    async def run(self, args: dict[str, Any]) -> str:
        return await self.call(parse_args(self.name, self.args_type, args))

    @abstractmethod
    async def call(self, args: A) -> str:
        """Run with checked arguments."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTool(StructTool[A]):
    """A tool made from ``async def f(args: SomeStruct) -> str`` (see :func:`tool`)."""

    def __init__(
        self,
        fn: Callable[[A], Awaitable[str]],
        *,
        name: str,
        description: str,
        args_type: type[A],
        check: CheckHook | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.description = description
        self.args_type = args_type
        self.check = check
        """The tool's ``check(key)`` hook (see :data:`CheckHook`), if it has one."""

    async def call(self, args: A) -> str:
        return await self.fn(args)


def tool(
    *, name: str, description: str | None = None
) -> Callable[[Callable[[A], Awaitable[str]]], FunctionTool[A]]:
    """Make a tool of an async function; its one parameter's annotation is the args Struct.

    ``description`` defaults to the function's docstring.
    """

    def wrap(fn: Callable[[A], Awaitable[str]]) -> FunctionTool[A]:
        params = list(inspect.signature(fn).parameters)
        args_type = get_type_hints(fn).get(params[0]) if len(params) == 1 else None
        if not (isinstance(args_type, type) and issubclass(args_type, msgspec.Struct)):
            raise TypeError(f"{fn.__qualname__} must take one msgspec.Struct argument")
        text = description if description is not None else inspect.getdoc(fn)
        return FunctionTool(fn, name=name, description=text or "", args_type=cast(Any, args_type))

    return wrap
