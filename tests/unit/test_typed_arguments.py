"""A task's (and a tool's) arguments checked against its type hints (runwright.core._arguments):
pydantic's lax mode, as FastAPI checks a request; one line naming each argument refused;
what a run stores is JSON that the worker turns back into the same values."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import math
import uuid
from typing import Annotated, Any, Literal

import pydantic
import pytest

import runwright as rw
from runwright.agents._tools import tool_spec


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Line(pydantic.BaseModel):
    sku: str
    qty: int = 1


class Order(pydantic.BaseModel):
    lines: list[Line]
    due: dt.datetime | None = None
    note: str = pydantic.Field("", alias="memo")


def _app() -> rw.App:
    return rw.App("memory://", builtin_jobs=False)


def test_a_task_without_hints_or_with_any_is_never_checked():
    app = _app()

    @app.task
    async def loose(ctx, a, b: Any = None, c: object = None, **rest):
        return a

    @app.task
    def hinted_context_only(ctx: rw.Context, a) -> int:  # the Context is not an argument
        return 0

    for spec in (loose, hinted_context_only):
        assert spec.arguments.typed is False
    assert loose.arguments.to_json({"a": "x", "b": [1], "zz": 2}) == {"a": "x", "b": [1], "zz": 2}


@pytest.mark.parametrize("hint, given, stored", [
    (int, "3", 3),
    (int, 3.0, 3),
    (float, "2.5", 2.5),
    (bool, "true", True),
    (str, "x", "x"),
    (list[int], ["1", 2], [1, 2]),
    (tuple[int, str], ["1", "a"], (1, "a")),  # stored as a list by the JSON encoder
    (dict[str, float], {"a": "1.5"}, {"a": 1.5}),
    (int | None, None, None),
    (Literal["a", "b"], "a", "a"),
    (Annotated[int, pydantic.Field(ge=0)], "4", 4),
    (dt.datetime, "2026-12-01T09:00:00Z", "2026-12-01T09:00:00Z"),
    (dt.date, "2026-12-01", "2026-12-01"),
    (decimal.Decimal, "1.10", "1.10"),
    (uuid.UUID, "12345678-1234-5678-1234-567812345678", "12345678-1234-5678-1234-567812345678"),
    (Color, "red", "red"),
    (set[int], ["2", "1", "2"], [1, 2]),
    (Line, {"sku": "a", "qty": "2"}, {"sku": "a", "qty": 2}),
    (Order, {"lines": [{"sku": "a"}], "memo": "hi"}, {"lines": [{"sku": "a", "qty": 1}], "due": None,
                                                       "memo": "hi"}),
])
def test_json_shaped_input_is_coerced_stored_as_json_and_rebuilt_the_same(hint, given, stored):
    app = _app()

    async def task(ctx: rw.Context, value) -> None:
        return None

    task.__annotations__["value"] = hint  # a hint of this test's parameter: not a name the module has
    spec = app.task(name="t")(task)
    as_stored = spec.arguments.to_json({"value": given})
    assert as_stored == {"value": stored}
    received = spec.received(rw_json(as_stored))["value"]
    assert received == spec.arguments.validate({"value": given})["value"]
    if isinstance(hint, type) and not isinstance(given, hint):
        assert isinstance(received, hint)  # a model, a datetime, an enum... arrives as itself


def rw_json(values: dict) -> str:
    from runwright.tasks._serde import encode

    return encode(values, "arguments")


def test_a_value_that_does_not_fit_is_refused_in_one_line_naming_the_argument():
    app = _app()

    @app.task
    async def double(ctx: rw.Context, n: int) -> int:
        return 2 * n

    with pytest.raises(rw.BadArguments) as refused:
        double.arguments.to_json({"n": "abc"})
    assert str(refused.value) == ("task 'double': argument 'n': Input should be a valid integer, unable to "
                                  "parse string as an integer (got 'abc')")
    assert isinstance(refused.value, rw.InvalidInput) and isinstance(refused.value, ValueError)


def test_every_problem_is_named_with_its_place_within_the_argument():
    app = _app()

    @app.task
    async def place(ctx: rw.Context, order: Order, when: dt.datetime, rate: float = 1.0) -> None:
        return None

    with pytest.raises(rw.BadArguments) as refused:
        place.arguments.to_json({"order": {"lines": [{"qty": "x" * 200}]}, "when": "never",
                                 "rate": math.nan})
    message = str(refused.value)
    assert "\n" not in message
    assert message.split("; ") == [
        "task 'place': argument 'order.lines.0.sku': Field required",
        "argument 'order.lines.0.qty': Input should be a valid integer, unable to parse string as an "
        f"integer (got '{'x' * 27}...{'x' * 28}')",  # a long value is cut
        "argument 'when': Input should be a valid datetime or date, input is too short (got 'never')",
        "argument 'rate': Input should be a finite number (got nan)",  # JSON has no NaN
    ]


def test_many_problems_are_counted_past_the_first_five():
    app = _app()

    @app.task
    async def many(ctx: rw.Context, values: list[int]) -> None:
        return None

    with pytest.raises(rw.BadArguments, match=r"argument 'values\.4': .*; and 3 more$"):
        many.arguments.to_json({"values": ["a"] * 8})


def test_only_what_was_given_is_checked_and_stored_and_unhinted_values_pass_as_given():
    app = _app()

    @app.task
    async def mixed(ctx: rw.Context, n: int, tag, extra: Any = None, limit: int = 10) -> None:
        return None

    assert mixed.arguments.to_json({"n": "1", "tag": ["as", "given"]}) == {"n": 1, "tag": ["as", "given"]}


def test_a_typed_kwargs_checks_each_extra_value():
    app = _app()

    @app.task
    async def scores(ctx: rw.Context, name: str, **points: int) -> None:
        return None

    bound = scores.bind((), {"name": "a", "x": "1", "y": 2})
    assert scores.arguments.to_json(bound) == {"name": "a", "x": 1, "y": 2}
    with pytest.raises(rw.BadArguments, match="argument 'z': Input should be a valid integer"):
        scores.arguments.to_json({"name": "a", "z": "zz"})

    @app.task
    async def stamps(ctx: rw.Context, **at: dt.datetime) -> None:
        return None

    moment = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert stamps.arguments.to_json({"start": moment}) == {"start": "2026-01-02T03:04:05Z"}
    assert stamps.received('{"start": "2026-01-02T03:04:05Z"}') == {"start": moment}


def test_a_hint_named_later_in_the_module_resolves_and_one_that_never_does_is_a_config_error():
    app = _app()

    @app.task
    async def later(ctx: rw.Context, item: DefinedAfter) -> str:  # noqa: F821 (defined below)
        return item.name

    assert later.arguments.to_json({"item": {"name": "x"}}) == {"item": {"name": "x"}}

    @app.task
    async def never(ctx: rw.Context, item: NoSuchType) -> None:  # noqa: F821
        return None

    with pytest.raises(rw.ConfigError, match="task 'never': the type hint of argument 'item' "
                                             r"\('NoSuchType'\) cannot be resolved: name 'NoSuchType'"):
        never.arguments.to_json({"item": 1})


def test_a_hint_pydantic_cannot_check_is_a_config_error_naming_the_argument():
    app = _app()

    class Opaque:  # neither JSON nor a type pydantic knows
        pass

    def opaque(ctx: rw.Context, ok: int, thing: Opaque) -> None:  # hints are objects here, resolved
        return None

    opaque.__annotations__ = {"ok": int, "thing": Opaque}
    spec = app.task(opaque)
    with pytest.raises(rw.ConfigError, match="task 'opaque': the type hint of argument 'thing' cannot be "
                                             "checked by pydantic"):
        spec.arguments.to_json({"ok": 1, "thing": 2})

    def within(ctx: rw.Context, ok: int, items) -> None:
        return None

    within.__annotations__ = {"ok": int, "items": list["NoSuchLine"]}  # noqa: F821 (a name in a hint)
    spec = app.task(within)
    with pytest.raises(rw.ConfigError, match="task 'within': the type hint of argument 'items' cannot be "
                                             "checked by pydantic"):
        spec.arguments.to_json({"ok": 1, "items": []})
    assert app.task(name="later_within")(_later_within).arguments.to_json({"items": [{"name": "a"}]}) == {
        "items": [{"name": "a"}]}  # a name within a hint, defined below in the module: resolved there


def test_stored_arguments_that_no_longer_fit_end_the_run_without_retry():
    app = _app()

    @app.task
    async def double(ctx: rw.Context, n: int) -> int:
        return 2 * n

    assert double.received('{"n": "4"}') == {"n": 4}  # stored by an older version, as given
    with pytest.raises(rw.FinalError, match="task 'double': argument 'n': .* do not fit the task"):
        double.received('{"n": "four"}')


def test_a_tool_call_is_checked_whole_its_defaults_filled_in():
    def search(query: str, limit: int = 5, since: dt.date | None = None) -> list:
        """Search."""
        return []

    tool = tool_spec(search, None, "at_least_once")
    assert tool.validate('{"query": "x", "limit": "3", "since": "2026-01-02"}') == {
        "query": "x", "limit": 3, "since": dt.date(2026, 1, 2)}
    assert tool.validate({"query": "x"}) == {"query": "x", "limit": 5, "since": None}
    schema = tool.schema()["function"]["parameters"]
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False
    with pytest.raises(rw.BadArguments) as refused:
        tool.validate('{"limit": "many", "order": "asc"}')
    assert str(refused.value) == (
        "tool 'search': argument 'query': Field required; argument 'limit': Input should be a valid "
        "integer, unable to parse string as an integer (got 'many'); argument 'order': Extra inputs are "
        "not permitted")


def _later_within(ctx: rw.Context, items) -> None:
    return None


_later_within.__annotations__["items"] = list["DefinedAfter"]  # a name within a hint, as text


class DefinedAfter(pydantic.BaseModel):
    name: str


def test_a_server_with_a_task_whose_hint_cannot_be_checked_refuses_to_start():
    """At the start, naming the task and the argument: never a 500 at its first submission."""
    from runwright.server import Auth, create_server

    app = _app()

    @app.task
    async def never(ctx: rw.Context, item: NoSuchType) -> None:  # noqa: F821
        return None

    with pytest.raises(rw.ConfigError, match="task 'never': the type hint of argument 'item'"):
        create_server(app, Auth(enabled=False))
