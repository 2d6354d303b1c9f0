"""Bad input is refused with a clear error before anything is written."""

import asyncio
import datetime as dt
import math
import re

import pytest

import runwright as rw
from runwright.agents._tools import tool_spec
from runwright.cli._params import Integer, Number, Text, UsageError
from runwright.core import _inputs as inputs
from runwright.store import store_from_url
from runwright.tasks._retry import Backoff, RetryPolicy
from runwright.tasks._serde import MAX_DEPTH, decode, encode


def test_encode_refuses_what_json_cannot_hold_and_oversized_payloads():
    with pytest.raises(rw.SerializationError, match="arguments of x"):
        encode({"a": object()}, "arguments of x")
    with pytest.raises(rw.SerializationError):
        encode({"a": math.nan}, "arguments of x")
    with pytest.raises(rw.PayloadTooLarge, match="over the limit of 100"):
        encode({"a": "é" * 80}, "arguments of x", max_bytes=100)
    assert encode({"a": [1, "b"]}, "x") == '{"a":[1,"b"]}'


def _nested(depth: int, leaf=1):
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_values_nested_past_the_depth_limit_are_refused_not_a_recursion_error(depth):
    with pytest.raises(rw.SerializationError, match=f"args is nested deeper than the limit of {MAX_DEPTH}"):
        encode(_nested(depth), "args")
    text = '{"k":' * depth + "1" + "}" * depth
    with pytest.raises(rw.SerializationError, match=f"--args is nested deeper than the limit of {MAX_DEPTH}"):
        decode(text, "--args")


def test_values_within_the_depth_limit_encode_and_brackets_in_strings_do_not_count():
    text = encode(_nested(MAX_DEPTH), "args")
    assert text.count("[") + text.count("{") == MAX_DEPTH and decode(text, "--args") == _nested(MAX_DEPTH)
    assert encode({"a": "[" * 10_000}, "args") == '{"a":"' + "[" * 10_000 + '"}'
    assert encode([[1]] * 10_000, "args").startswith("[[1],[1]")  # wide is not deep
    assert decode('{"a": [1]}', "--args") == {"a": [1]}
    with pytest.raises(rw.InvalidInput, match="--args is not JSON"):
        decode("{nope", "--args")


def test_backoff_grows_caps_and_jitters():
    backoff = Backoff(base_s=1, factor=2, cap_s=10, jitter=0)
    assert [backoff.delay_s(n) for n in (1, 2, 3, 4, 5, 6)] == [1, 2, 4, 8, 10, 10]
    jittered = Backoff(base_s=1, factor=2, cap_s=10, jitter=0.5)
    delays = {round(jittered.delay_s(3), 6) for _ in range(50)}
    assert len(delays) > 1 and all(2 <= d <= 6 for d in delays)
    with pytest.raises(rw.InvalidInput, match="bad backoff"):
        Backoff(factor=0.5)
    with pytest.raises(rw.InvalidInput, match="retries must be >= 0"):
        RetryPolicy(retries=-1)


def test_retry_policy_final_errors():
    policy = RetryPolicy(retries=2, retry_on=(ConnectionError,), give_up_on=(PermissionError,))
    assert policy.max_attempts == 3
    assert not policy.is_final(ConnectionError())
    assert policy.is_final(ValueError())  # not in retry_on
    assert policy.is_final(rw.FinalError())
    assert RetryPolicy(give_up_on=(KeyError,)).is_final(KeyError())


def test_store_urls_are_checked():
    with pytest.raises(rw.ConfigError, match="unknown store URL"):
        store_from_url("mysql://x")
    with pytest.raises(rw.ConfigError, match="not an in-memory"):
        store_from_url("sqlite:///:memory:")
    with pytest.raises(rw.ConfigError, match="synchronous"):
        store_from_url("sqlite:///x.db?journal=off")
    redis_store = store_from_url("rediss://:secret@h:6380/2?namespace=team-a&liveness_s=2")
    assert redis_store.prefix == "rw:{team-a}:" and redis_store.liveness_s == 2.0
    assert store_from_url("redis://localhost").prefix == "rw:{runwright}:"
    with pytest.raises(rw.ConfigError, match="namespace"):
        store_from_url("redis://localhost?namespace=a:b")
    assert store_from_url("postgresql://u@h/db?schema=abc").schema == "abc"
    with pytest.raises(rw.ConfigError):
        store_from_url("postgresql://u@h/db?schema=a;drop")


def test_task_registration_errors():
    assert {"webhook", "llm", "chain"} <= set(rw.App("sqlite:///unused.db").tasks)
    app = rw.App("sqlite:///unused.db", builtin_jobs=False)

    @app.task
    async def one(ctx, a: int) -> int:
        return a

    with pytest.raises(rw.ConfigError, match="registered twice"):
        app.task(name="one")(lambda ctx: None)
    with pytest.raises(rw.UnknownTask, match="registered tasks: one"):
        app.task_spec("two")
    with pytest.raises(rw.BadArguments, match="missing a required argument"):
        one.bind((), {})
    with pytest.raises(rw.BadArguments, match="unexpected keyword"):
        one.bind((), {"a": 1, "b": 2})
    assert one.bind((5,), {}) == {"a": 5}


@pytest.mark.parametrize("priority", [99999, -1, "high", True, 2.0, None])
def test_a_task_declared_with_a_priority_out_of_range_is_refused_at_declaration(priority):
    """A priority no submission would take is refused where the task is declared, naming the
    task and the range, not at its first submission (which takes the task's default)."""
    app = rw.App("sqlite:///unused.db", builtin_jobs=False)
    says = re.escape(f"task 'urgent': priority must be an int in 0..32767 (0 = most urgent), "
                     f"got {priority!r}")
    with pytest.raises(rw.ConfigError, match=says):

        @app.task(priority=priority)
        async def urgent(ctx) -> None: ...
    assert "urgent" not in app.tasks
    for edge in (rw.CRITICAL, 32767):
        assert app.task(name=f"edge{edge}", priority=edge)(lambda ctx: None).priority == edge


def test_due_times_are_checked():
    from runwright.tasks._serde import due_at as _due_at

    assert _due_at(100.0, 5, None) == 105.0
    assert _due_at(100.0, None, dt.datetime(2030, 1, 1, tzinfo=dt.UTC)) == 1893456000.0
    for delay, run_at, match in [(1, 2, "not both"), (-1, None, ">= 0"), (math.inf, None, "finite"),
                                 (None, dt.datetime(2030, 1, 1), "no time zone"),
                                 (None, "tomorrow", "finite")]:
        with pytest.raises(rw.InvalidTime, match=match):
            _due_at(100.0, delay, run_at)


def test_tool_arguments_that_do_not_fit_are_bad_arguments_and_still_a_value_error():
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    tool = tool_spec(add, None, "at_least_once")
    assert tool.validate('{"a": 1, "b": 2}') == {"a": 1, "b": 2}
    assert tool.validate({"a": "1", "b": 2.0}) == {"a": 1, "b": 2}  # lax, as a task's arguments
    with pytest.raises(rw.BadArguments) as refused:
        tool.validate('{"a": "one", "c": 3}')
    assert str(refused.value) == (  # every problem, on one line, each argument named
        "tool 'add': argument 'a': Input should be a valid integer, unable to parse string as an "
        "integer (got 'one'); argument 'b': Field required; argument 'c': Extra inputs are not permitted")
    assert isinstance(refused.value, ValueError)  # what the agent loop catches
    for raw, said in [("[1, 2]", "must be a JSON object, got list"), ("{", "not JSON")]:
        with pytest.raises(rw.BadArguments, match=said):
            tool.validate(raw)


# -- what each input may be (runwright.core._inputs): one answer for library, CLI and HTTP -----

HOSTILE_TEXT = [("NUL", "a\x00b"), ("a lone surrogate", "a\ud800"), ("an undecodable byte", "a\udcff"),
                ("empty", ""), ("over-long", "x" * 100_000), ("not a string", 5), ("None", None)]


@pytest.mark.parametrize("check, what", [(inputs.thread_name, "thread"), (inputs.key, "key"),
                                         (inputs.tenant, "tenant"), (inputs.queue, "queue"),
                                         (inputs.answerer, "by")])
@pytest.mark.parametrize("label, value", HOSTILE_TEXT + [("a control character", "a\x01b"),
                                                         ("a newline", "a\nb"), ("DEL", "a\x7f")],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_a_name_refuses_what_no_store_or_line_can_hold(check, what, label, value) -> None:
    with pytest.raises(rw.InvalidInput, match=f"^{what} must be") as refused:
        check(value)
    assert isinstance(refused.value, ValueError) and len(str(refused.value)) < 200  # one short line


def test_a_name_may_be_any_other_text_within_its_length() -> None:
    for name in ("t", "é-\u4e2d-\U0001f600", "a b", "\ufffd", "x" * inputs.MAX_THREAD_CHARS):
        assert inputs.thread_name(name) == name
    assert inputs.key("k" * inputs.MAX_KEY_CHARS)
    with pytest.raises(rw.InvalidInput, match="at most 256 characters"):
        inputs.thread_name("x" * (inputs.MAX_THREAD_CHARS + 1))
    with pytest.raises(rw.InvalidInput, match="must not be blank"):
        inputs.answerer("  ")


@pytest.mark.parametrize("text", ["-1", "2147483648", "99999999999999999999", "²", "٣", "1_0", "1e3", "1.0",
                                  "", " ", "0x10", "inf", "nan", "\x00"])
def test_a_sequence_number_is_ascii_digits_in_range(text) -> None:
    with pytest.raises(rw.InvalidInput, match="^Last-Event-ID must be an integer in 0..2147483647"):
        inputs.sequence_text(text)
    assert inputs.sequence_text("0") == 0 and inputs.sequence_text("2147483647") == 2**31 - 1


@pytest.mark.parametrize("value", [-1, 2**31, True, 1.0, "1", None])
def test_an_integer_is_an_int_in_its_range(value) -> None:
    with pytest.raises(rw.InvalidInput, match="^after must be an integer in 0..2147483647"):
        inputs.sequence(value)


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "NaN", "Infinity", "1e400", "-1", "0", "١", "²",
                                  "1_0", "", "2e9"])
def test_a_duration_is_finite_positive_and_bounded(text) -> None:
    with pytest.raises(rw.InvalidInput, match="^--lease-s must be a finite number > 0 and <= 1e"):
        inputs.number_text(text, "--lease-s", 0, inputs.MAX_SECONDS, low_open=True)
    for value in (math.nan, math.inf, -math.inf, 0, -1, 1e10, True):
        with pytest.raises(rw.InvalidInput):
            inputs.seconds(value, "lease_s")
    assert inputs.number_text("1.5e1", "x", 0, 100) == 15.0 and inputs.seconds(0.5, "x") == 0.5


def test_the_library_refuses_a_bad_name_before_any_store_is_touched() -> None:
    """No store is reachable at this URL: each refusal comes before the first connect."""
    app = rw.App("postgresql://nobody@127.0.0.1:1/none", builtin_jobs=False)
    calls = [lambda: app.thread_history("a\x00"), lambda: app.thread_info("t", incarnation=0),
             lambda: app.list_runs(thread="a\x00"), lambda: app.list_runs(key=""),
             lambda: app.list_runs(task="a\x01"), lambda: app.cancel_thread("\ud800"),
             lambda: app.delete_thread(""), lambda: app.events_page(1, after=2**31),
             lambda: app.thread_events_page("t", after=-1), lambda: app.answer(1, 0, True, by="a\x00"),
             lambda: app.answer(1, 0, True, by="")]
    for call in calls:
        with pytest.raises(rw.InvalidInput):
            asyncio.run(call())
    with pytest.raises(rw.InvalidInput, match="^tenant must be"):
        app.tenant("a\x00")
    with pytest.raises(rw.InvalidInput, match="^thread must be"):
        app.thread("")


def test_worker_settings_refuse_nan_and_infinite_durations() -> None:
    from runwright.engine._worker import WorkerConfig

    for setting in ({"lease_s": math.nan}, {"lease_s": math.inf}, {"drain_grace_s": math.nan},
                    {"poll_s": math.inf}, {"queues": ["a\x00"]}, {"queues": ["x" * 201]}):
        with pytest.raises(rw.ConfigError):
            WorkerConfig(**setting)


@pytest.mark.parametrize("kind, text", [(Integer(1, 10), "0"), (Integer(1, 10), "11"), (Integer(1, 10), "٣"),
                                        (Integer(1, 10), "1e1"), (Number(0, 5, low_open=True), "nan"),
                                        (Number(0, 5, low_open=True), "inf"), (Number(0, 5), "-0.5"),
                                        (Text(5), ""), (Text(5), "abcdef"), (Text(5), "a\x00"),
                                        (Text(5), "a\udcff")])
def test_a_command_line_value_of_the_wrong_kind_is_one_usage_error(kind, text) -> None:
    with pytest.raises(UsageError, match="^InvalidInput: the value must be"):
        kind.convert(text, None, None)
