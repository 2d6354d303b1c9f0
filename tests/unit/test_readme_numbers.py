"""The README's numbers are the code's: each number it types that the code defines (a
default, a limit, a schema version, an exit code, a status) is read here from both and
compared, so a change on one side and not the other fails. Numbers the README measured
(test times, takeover latencies) or made up as examples are not the code's, and are not
listed. Read with the README's whitespace folded, so a phrase may wrap."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any, Callable

import pytest

import runwright as rw
from runwright.cli import _demo as demo
from runwright.cli import _exits as exits
from runwright.cli._main import command
from runwright.client._why import SCAN_LIMIT
from runwright.core import _inputs as inputs
from runwright.core._versions import MAX_MAJORS
from runwright.engine._rescuer import UNRUNNABLE_LOOK_MIN_S
from runwright.engine._sweeper import Sweeper
from runwright.engine._worker import SWEEP_LEASE_TICKS, WorkerConfig
from runwright.fleet._boot import DRAIN_BUDGETS
from runwright.fleet._settings import FleetSettings
from runwright.integrations.openai_agents import _run as sdk_agents
from runwright.move import _moving as move_rate
from runwright.observe import _metrics as metrics
from runwright.server import _factory as factory
from runwright.server import _sse as sse
from runwright.server._problems import STATUS
from runwright.server._series import HISTORY_S
from runwright.store._bus import MAX_MESSAGE_BYTES
from runwright.store._liveness import MISSING_GRACE_S
from runwright.store.postgres import _store as postgres
from runwright.store.redis import _store as redis
from runwright.store.redis._keeper import REFRESHES_PER_TTL
from runwright.store.sqlite import _bus as sqlite_bus
from runwright.store.sqlite import _store as sqlite
from runwright.tasks._limits import Limits
from runwright.tasks._registry import Registry
from runwright.tasks._submission import MAX_PRIORITY
from runwright.testing import Env
from runwright.verify import _faults as faults
from runwright.verify import _fleet as verify_fleet

from ..pg_budget import DEFAULT_BUDGET

ROOT = Path(__file__).resolve().parents[2]
README = " ".join((ROOT / "README.md").read_text().split())
WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "ten": 10}


def g(value: float) -> str:
    """A number as the README writes it: 60, 0.5, 1000 (its thousands' commas are dropped
    before comparing)."""
    return f"{value:g}"


def default(fn: Callable[..., Any], name: str) -> Any:
    return inspect.signature(fn).parameters[name].default


def option_default(path: str, name: str) -> Any:
    return next(p.default for p in command().commands[path].params if p.name == name)


def migration_named(migrations: list[Any], name: str) -> int:
    (version,) = [m.version for m in migrations if m.name == name]
    return int(version)


def _status(kind: type[Exception]) -> int:
    return next(status for error, status, _ in STATUS if issubclass(kind, error))


SLOTS = option_default("demo", "workers") * demo.CONCURRENCY

# (what it is, a pattern over the README, what the code says each group must read)
CLAIMS: list[tuple[str, str, tuple[Any, ...]]] = [
    # Try it: the demo's shape, and the rate its sleeps allow.
    ("the demo's workers, slots and runs",
     r"demo on the embedded SQLite default: (\d+) worker processes of (\d+) slots, (\d+) runs",
     (option_default("demo", "workers"), demo.CONCURRENCY, option_default("demo", "runs_count"))),
    ("the demo's sleep and the rate it allows",
     r"each run only sleeps ([\d.]+)-([\d.]+) s, so (\d+) slots allow at most (\d+) runs/s",
     (g(demo.WORK_S * demo.JITTER[0]), g(demo.WORK_S * demo.JITTER[1]), SLOTS, g(SLOTS / demo.WORK_S))),
    # Quick start: a worker's start line, for jobs.py's one task.
    ("the tasks every App registers", r"Each logs `worker started \.\.\. tasks=1 built_in_tasks=(\d+)`",
     (len(rw.App("memory://").registry.built_in),)),
    # Run the tests.
    ("the suite's xdist workers", r"other work on the machine\), in (\d+) pytest-xdist workers",
     (re.search(r"RUNWRIGHT_TEST_WORKERS:-(\d+)", (ROOT / "scripts" / "test").read_text()).group(1),)),  # type: ignore[union-attr]
    ("the suite's PostgreSQL budget", r"within a budget of (\d+) connections", (DEFAULT_BUDGET,)),
    ("the slowest tests listed", r"the (\d+) slowest tests",
     (re.search(r"--durations=(\d+)", (ROOT / "pyproject.toml").read_text()).group(1),)),  # type: ignore[union-attr]
    # Submission.
    ("the priority range and its names",
     r"`priority` \(an integer in 0\.\.(\d+), lower runs first: `rw\.CRITICAL` (\d), `rw\.HIGH` (\d), "
     r"`rw\.NORMAL` (\d), a task's default, `rw\.LOW` (\d)\)",
     (MAX_PRIORITY, rw.CRITICAL, rw.HIGH, default(Registry.task, "priority"), rw.LOW)),
    ("a key conflict over HTTP", r"`rw\.KeyConflict` \(HTTP (\d+), exit (\d)\)",
     (_status(rw.KeyConflict), exits.code_for(rw.KeyConflict("k", 1, [], "")))),
    ("a signal past the pending cap",
     r"`Limits\.max_pending_signals` \(([\d,]+)\) signals not yet taken \(`SignalsFull`, (\d+), exit (\d)\)",
     (Limits().max_pending_signals, _status(rw.SignalsFull), exits.code_for(rw.SignalsFull("x")))),
    ("the payload codecs' compression threshold", r"`compress_over` \(bytes of JSON, default ([\d,]+);",
     (rw.Codecs().compress_over,)),
    ("the grace before an unnamed blob is deleted", r"older than `blob_grace_s` \(default (\d+):",
     (g(rw.Codecs().blob_grace_s),)),
    ("a payload under a missing key",
     r"the CLI \(with `--decode`\) prints that line and exits (\d), HTTP answers (\d+) with it",
     (exits.code_for(rw.PayloadUnreadable("x")), _status(rw.PayloadUnreadable))),
    ("the CLI's --decode without the keys",
     r"keys \(`RUNWRIGHT_PAYLOAD_KEYS`; without them one line, exit (\d)\)",
     (exits.BAD_INPUT,)),
    ("a refused manual retry", r"`RunNotRetryable` \((\d+); `runwright retry` exits (\d)\)",
     (_status(rw.RunNotRetryable), exits.code_for(rw.RunNotRetryable(1, "queued", False)))),
    ("a submit --wait that timed out", r"gives up waiting after S seconds \(exit (\d)", (exits.TIMED_OUT,)),
    ("a reading command without a database", r"they say so and exit (\d)\.", (exits.NO_SCHEMA,)),
    ("an unknown thread from the command line", r"is exit (\d), and `answer --by ''`", (exits.NOT_FOUND,)),
    # Testing and agents.
    ("env.result's real-time timeout", r"`env\.result` times out in real time \(`timeout_s`, (\d+) s\)",
     (g(default(Env.result, "timeout_s")),)),
    ("an agent's snapshots", r"every `snapshot_every` turns \(default (\d+)\)",
     (default(rw.App.agent, "snapshot_every"),)),
    ("an SDK agent's item texts", r"\(texts cut at ([\d,]+) characters\)", (sdk_agents.ITEM_TEXT_LIMIT,)),
    ("an SDK agent's tools at once", r"the SDK's `max_function_tool_concurrency=(\d+)`",
     (sdk_agents.TOOLS_AT_ONCE,)),
    # HTTP.
    ("the body limit", r"413 \(a body over (\d+) MiB\)", (factory.MAX_BODY_BYTES >> 20,)),
    ("a reclaimed run", r"`RunExpired` \(a `RunNotFound`; HTTP (\d+)", (_status(rw.RunExpired),)),
    ("a deleted thread", r"A deleted thread reads `ThreadDeleted` \((\d+)\)", (_status(rw.ThreadDeleted),)),
    ("a thread no run was submitted to", r"is `ThreadNotFound` \((\d+)\)", (_status(rw.ThreadNotFound),)),
    ("the event stream's retry and pings",
     r"It opens with `retry: (\d+)` and sends a `: ping` comment every (\d+) s",
     (sse.RETRY_MS, g(sse.PING_S))),
    ("the pings of a stream that waits", r"the stream stays open \(a `: ping` every (\d+) s\)",
     (g(sse.PING_S),)),
    ("queue depth sampling", r"samples it every (\d+) s while it runs \(an (hour) kept",
     (g(factory.DEPTH_SAMPLE_S), {3600.0: "hour"}[HISTORY_S])),
    ("the summary's latency sample and throughput",
     r"over the latest (\d+) runs ended in the last (\d+) minutes, and the throughput of the last (minute)",
     (metrics.LATENCY_SAMPLE, g(metrics.LATENCY_WINDOW_S / 60),
      {60.0: "minute"}[metrics.THROUGHPUT_WINDOW_S])),
    ("names' lengths", r"is a non-empty string of at most (\d+), (\d+), (\d+), (\d+) and (\d+) characters",
     (inputs.MAX_THREAD_CHARS, inputs.MAX_KEY_CHARS, inputs.MAX_TENANT_CHARS, inputs.MAX_QUEUE_CHARS,
      inputs.MAX_NAME_CHARS)),
    ("a log position", r"is ASCII digits in 0\.\.2\^(\d+)-1", ((inputs.MAX_SEQ + 1).bit_length() - 1,)),
    ("a delay and an epoch", r"a `delay_s` is at most 10\^(\d+) s and a numeric `run_at` epoch seconds in "
                             r"0\.\.10\^(\d+)",
     (len(str(int(inputs.MAX_SECONDS))) - 1, len(str(int(inputs.MAX_EPOCH_S))) - 1)),
    ("the unrunnable gauge", r"no live worker can run, checked every (\d+) s",
     (g(WorkerConfig().orphan_check_s),)),
    # Retention.
    ("the sweep's interval and lease",
     r"ticks every `--sweep-interval-s` \((\d+) s\); the one holding the `sweep` lease \(by the store's "
     r"clock; it lapses after (\w+) intervals",
     (g(WorkerConfig().sweep_interval_s), SWEEP_LEASE_TICKS)),
    ("the sweep's batches", r"in batches of ([\d,]+), at most (\w+) of each kind a pass",
     (g(default(Sweeper, "batch")), default(Sweeper, "max_batches"))),
    # The fleet bus.
    ("a recycle's apply window", r"`RUNWRIGHT_FLEET_APPLY_WINDOW_S` \((\d+) s by default\)",
     (g(FleetSettings().apply_window_s),)),
    ("a server's drain", r"it reads `recycling` with a (\d+) s drain", (g(factory.DRAIN_S),)),
    ("SQLite's bus poll", r"messages that every process polls every (\d+) ms",
     (g(sqlite_bus.POLL_S * 1000),)),
    ("a bus message", r"A message is at most ([\d,]+) bytes", (g(MAX_MESSAGE_BYTES),)),
    ("the presence clocks",
     r"`RUNWRIGHT_FLEET_HEARTBEAT_S` \((\d+) s\), `RUNWRIGHT_FLEET_STALE_S` \(the freshness gate, "
     r"(\d+) s\), `RUNWRIGHT_FLEET_TTL_S` \((\d+) s\), `RUNWRIGHT_FLEET_TIMEOUT_S` \(a broadcast's default "
     r"window, (\d+) s\)",
     tuple(g(getattr(FleetSettings(), name)) for name in ("heartbeat_s", "stale_s", "ttl_s",
                                                           "broadcast_timeout_s"))),
    ("the apply window's floor",
     r"an apply window below (\w+) drain budgets \(`RUNWRIGHT_FLEET_APPLY_WINDOW_S` < (\d+) x "
     r"`--drain-grace-s`\)", (DRAIN_BUDGETS, DRAIN_BUDGETS)),
    # Upgrades and schemas.
    ("a task's majors", r"`versions=` must include the app's own major and name at most (\d+);",
     (MAX_MAJORS,)),
    ("where runs began to record a version",
     r"before migration (\d+) on SQLite and PostgreSQL, key layout (\d+) on Redis\) are any major's",
     (migration_named(sqlite.MIGRATIONS, "versions"), redis.VERSIONED_RUNS)),
    ("the migration that keeps why a run waits",
     r"\(`runs.waiting`, migration (\d+) on SQLite, (\d+) on PostgreSQL",
     (migration_named(sqlite.MIGRATIONS, "run_waiting"),
      migration_named(postgres.MIGRATIONS, "run_waiting"))),
    ("the migration that keeps forks",
     r"Forks are kept by `runs.forked_from` \(migration (\d+) on SQLite, (\d+) on PostgreSQL",
     (migration_named(sqlite.MIGRATIONS, "run_forks"), migration_named(postgres.MIGRATIONS, "run_forks"))),
    ("the due runs a judged filter reads", r"a list filtered by one of them judges the newest (\d+)",
     (SCAN_LIMIT,)),
    ("the schemas this runwright knows",
     r"this runwright knows migration (\d+) on SQLite, (\d+) on PostgreSQL and key layout (\d+) on Redis",
     (sqlite.SqliteStore.schema_version_known, postgres.PostgresStore.schema_version_known,
      redis.RedisStore.schema_version_known)),
    ("Redis's layout that lists threads", r"Redis's key layout (\d+) lists threads", (redis.LISTED_THREADS,)),
    ("Redis's layout that lists threads, recorded", r"before it records layout (\d+);",
     (redis.LISTED_THREADS,)),
    ("Redis's layout that keeps limits texts' due sets",
     r"Redis's key layout (\d+) keeps the queued runs that carry concurrency limits", (redis.LIMIT_TEXTS,)),
    ("Redis's layout that keeps limits texts' due sets, recorded",
     r"before it records layout (\d+) \(the same advice", (redis.LIMIT_TEXTS,)),
    ("the unrunnable close", r"`WorkerConfig`; (\d+) s by default\), judged by the store's clock",
     (g(WorkerConfig().unrunnable_after_s),)),
    ("the unrunnable looks",
     r"Workers look every half of that setting \(at least every ([\d.]+) s, at most every (\d+) s\)",
     (g(UNRUNNABLE_LOOK_MIN_S), g(WorkerConfig().orphan_check_s))),
    # A cluster on PostgreSQL, on Redis.
    ("PostgreSQL's default schema", r"a URL without one uses the schema `(\w+)`", (postgres.DEFAULT_SCHEMA,)),
    ("PostgreSQL's default schema, for verify --fleet", r"a URL without `\?schema=` means the schema `(\w+)`",
     (postgres.DEFAULT_SCHEMA,)),
    ("a worker's sessions", r"holds (\w+) PostgreSQL sessions at rest", (postgres.SESSIONS_AT_REST,)),
    ("the pools' bounds",
     r"the store's pool up to `\?pool_size=` \((\d+) by default\), and the claiming pool "
     r"\(claims written with finishes, planned once\) up to (\d+), so a worker holds at most (\d+) sessions",
     (default(postgres.PostgresStore, "pool_size"), postgres.CLAIMING_SIZE,
      postgres.OWN_SESSIONS + default(postgres.PostgresStore, "pool_size") + postgres.CLAIMING_SIZE)),
    ("a pooled session's idle life", r"A pooled session unused for ([\d.]+) s is closed",
     (g(postgres.POOL_IDLE_S),)),
    ("the rescuer's poll", r"not by its poll \(every ([\d.]+) s, for what the ring misses\)",
     (g(WorkerConfig().rescue_interval_s),)),
    ("a cut session's grace", r"a missing lock counts as a death only after ([\d.]+) s",
     (g(MISSING_GRACE_S),)),
    ("the lease", r"its lease expires \(`--lease-s`, (\d+) s by default\)", (g(WorkerConfig().lease_s),)),
    ("Redis liveness",
     r"TTL \(`\?liveness_s=`, (\d+) s by default\) that its process refreshes (\w+) times per TTL",
     (g(redis.DEFAULT_LIVENESS_S), REFRESHES_PER_TTL)),
    ("a lapsed key's grace", r"a lapsed key counts as a death only once it has stayed lapsed for ([\d.]+) s",
     (g(MISSING_GRACE_S),)),
    # Verify.
    ("verify's runs by default", r"The default, `--runs (\d+)`, is a long run",
     (option_default("verify", "runs_count"),)),
    ("verify's lease", r"`--lease-s (\d+)` by default so that stalls are taken over quickly",
     (g(option_default("verify", "lease_s")),)),
    ("verify's serving", r"renews it every (\d+) s for (\d+) s", (g(verify_fleet.RENEW_S),
                                                               g(verify_fleet.SERVE_FOR_S))),
    ("verify's queue lapsing", r"the queue lapses within (\d+) s", (g(verify_fleet.SERVE_FOR_S),)),
    ("verify's queue lapsing, killed", r"its queue lapses in (\d+) s", (g(verify_fleet.SERVE_FOR_S),)),
    ("a stall", r"blocks the worker's event loop for ([\d.]+) leases \+ ([\d.]+) s",
     (g(faults.STALL_LEASES), g(faults.STALL_EXTRA_S))),
    ("verify --fleet with no fleet", r"exits \*\*(\d+)\*\*", (exits.NO_FLEET,)),
    ("verify interrupted", r"interrupted \(Ctrl-C, SIGTERM: exit (\d+)\)", (exits.INTERRUPTED,)),
    # Moves.
    ("a sealed store's refusal", r"\(`DeploymentMoved`; exit (\d+); HTTP (\d+) problem\+json",
     (exits.code_for(rw.DeploymentMoved("x", state="moving", target="y")), _status(rw.DeploymentMoved))),
    ("the old worker's exit", r"stops with the line and exit (\d+); a server answers writes with the (\d+)",
     (exits.MOVED, _status(rw.DeploymentMoved))),
    ("move --check's exit", r"checksum per kind on both stores and exits (\d+) on any difference",
     (exits.FAILED,)),
    ("a move to Redis of kinds it does not take", r"is refused before the seal \(exit (\d+), naming",
     (exits.code_for(rw.InvalidInput("x")),)),
    ("a namespace a move writes into", r"a\s+process opened on it is refused \(exit (\d+)\)", (exits.MOVED,)),
    ("the seal's reckoning", r"The \"retry in N s\" is reckoned at ([\d,]+) rows/s",
     (g(move_rate.ASSUMED_ROWS_PER_S),)),
]


@pytest.mark.parametrize("pattern, expected", [row[1:] for row in CLAIMS], ids=[row[0] for row in CLAIMS])
def test_the_readme_says_what_the_code_defines(pattern: str, expected: tuple[Any, ...]) -> None:
    found = re.findall(pattern, README)
    assert found, f"the README no longer says {pattern!r}: say it again, or drop its row here"
    for said in found:
        groups = said if isinstance(said, tuple) else (said,)
        # As numbers: "1,000" is 1000, "three" is 3.
        read = tuple(str(WORDS.get(group, group)).replace(",", "") for group in groups)
        assert read == tuple(str(value) for value in expected), (pattern, groups)


def test_the_submit_json_keys_and_the_submission_options_are_the_code_s() -> None:
    from runwright.cli._submitting import DOCUMENT_KEYS
    from runwright.tasks._submission import OPTIONS

    listed = re.search(r"`submit --json` takes the keys (.*?), and refuses any other by name", README)
    assert listed is not None
    assert re.findall(r"`(\w+)`", listed.group(1)) == list(DOCUMENT_KEYS)
    options = re.search(r"Submission options: (.*?)\. They are keyword-only names of `submit`", README)
    assert options is not None
    named = set(re.findall(r"`(\w+)(?:=[^`]*)?`", options.group(1)))
    assert set(OPTIONS) <= named, sorted(set(OPTIONS) - named)


def test_the_reasons_a_run_waits_are_the_code_s_in_its_order() -> None:
    """The README's table of why a run waits lists every `rw.WaitReason`, in order, and
    the count it says the store keeps is the code's (a reason added without a row, `signal`,
    left a reader without it)."""
    from runwright.runs import STORED_WAITS

    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Why a run waits\n"):]
    section = section[:section.index("\n### ", 1)]
    rows = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert rows == [reason.value for reason in rw.WaitReason]
    stored = [reason for reason in rw.WaitReason][:len(STORED_WAITS)]
    assert set(stored) == STORED_WAITS  # the stored ones come first
    said = re.search(r"The first (\w+) are recorded by the store", " ".join(section.split()))
    assert said is not None and WORDS.get(said.group(1), said.group(1)) == len(STORED_WAITS)
