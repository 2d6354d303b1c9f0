"""The `runwright` command's face: exit codes, help, JSON output, pipes, serve, submit
options, and that reading never creates a database. Real `runwright` processes."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import IO, Iterator

import httpx
import pytest

import runwright as rw
from runwright.cli._exits import BAD_INPUT, TABLE
from runwright.cli._main import command
from runwright.store._params import (
    RunClaimParams,
    RunCountParams,
    RunFinishParams,
    RunInsertParams,
    RunListParams,
    ThreadDeleteParams,
    WorkerRegisterParams,
)

from .harness import ROOT, wait_until

pytestmark = pytest.mark.process

CLI_APP = "tests.process.cli_apps:app"
NO_DATABASE = ("error: SchemaError: no such database at {path}; set RUNWRIGHT_URL or run "
               "`runwright migrate`")


def runwright(*args: str, url: str | None = None, cwd: Path = ROOT, timeout_s: float = 120,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`runwright ARGS` with stdout and stderr captured through pipes (not a terminal)."""
    base = {k: v for k, v in os.environ.items() if k not in ("RUNWRIGHT_URL", "COLUMNS")}
    if url is not None:
        base["RUNWRIGHT_URL"] = url
    return subprocess.run([sys.executable, "-m", "runwright", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=timeout_s)


@contextlib.contextmanager
def worker_process(url: str, *options: str) -> Iterator[subprocess.Popen]:
    worker = subprocess.Popen([sys.executable, "-m", "runwright", "worker", CLI_APP, "--url", url, *options],
                              cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)


def submitted(url: str, task: str, args: str, *options: str) -> int:
    """Submit through the command line (the tests' own App does not know CLI_APP's tasks)."""
    done = runwright("submit", CLI_APP, task, "--args", args, *options, url=url)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[1])


# -- reading never creates a database ---------------------------------------------------

READ_COMMANDS = [["status"], ["runs"], ["dead"], ["show", "1"], ["events", "1"], ["follow", "1"],
                 ["workers"], ["thread", "show", "t1"], ["thread", "list"], ["schedules"], ["runs", "--json"],
                 ["status", "--json"], ["cancel", "1"], ["retry", "1"], ["schedules", "pause", "nightly"],
                 ["limits"], ["limits", "set", "crm", "3"]]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=" ".join)
def test_a_command_that_only_reads_creates_no_database(args: list[str], tmp_path: Path) -> None:
    done = runwright(*args, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert done.stderr.splitlines() == [NO_DATABASE.format(path=tmp_path / "runwright.db")]
    assert done.stdout == ""
    assert not (tmp_path / "runwright.db").exists()
    assert list(tmp_path.iterdir()) == []


def test_migrate_then_reading_works_in_that_folder(tmp_path: Path) -> None:
    assert runwright("migrate", cwd=tmp_path).returncode == 0
    listed = runwright("runs", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


# -- exit codes, help, version ---------------------------------------------------------


def test_the_exit_codes_are_listed_in_the_top_level_help_and_the_readme() -> None:
    shown = runwright("--help")
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    start = lines.index("  Exit codes:")
    assert lines[start + 1:start + 1 + len(TABLE)] == [f"    {code}  {meaning}" for code, meaning in TABLE]
    # One meaning per code: 0 to 7, and the shells' 130 for an interrupted verify.
    assert [code for code, _ in TABLE] == [*range(len(TABLE) - 1), 130]
    readme = (ROOT / "README.md").read_text()
    for code, meaning in TABLE:
        assert f"| {code} | {meaning} |" in readme


def test_version_prints_the_installed_version() -> None:
    shown = runwright("--version")
    assert shown.returncode == 0 and shown.stdout == f"runwright {version('runwright')}\n"


def test_every_option_of_every_command_has_help_and_no_type_hint() -> None:
    group = command()
    commands = {"": group, **group.commands}
    assert {"worker", "serve", "submit", "runs", "status", "show", "events", "workers",
            "thread"} <= set(commands)
    for name, sub in commands.items():
        shown = runwright(*([name] if name else []), "--help")
        assert shown.returncode == 0, (name, shown.stderr)
        assert not re.search(r"<\w+>", shown.stdout), (name, shown.stdout)
        for param in sub.params:
            assert (param.help or "").strip(), f"runwright {name}: {param.name} has no help"
            for flag in getattr(param, "opts", []):
                if flag.startswith("--"):
                    # In the options' table: the command's description may wrap a flag it
                    # names to the start of a line too.
                    table = shown.stdout.split("\nOptions:", 1)[-1]
                    (line,) = [line for line in table.splitlines()
                               if re.match(rf" +(-\w, )?{re.escape(flag)}( |$)", line)]
                    assert line.split(flag, 1)[1].strip(), f"runwright {name} {flag}: no help shown"


def test_an_unknown_run_is_exit_5(store_url: str) -> None:
    assert runwright("migrate", url=store_url).returncode == 0
    for args in (["show", "987654"], ["events", "987654"], ["cancel", "987654"]):
        done = runwright(*args, url=store_url)
        assert done.returncode == 5, (args, done.stderr)
        assert done.stderr.splitlines() == ["error: RunNotFound: run 987654 not found"], args


# -- submit -----------------------------------------------------------------------------


async def test_submit_json_refuses_an_unknown_key_by_name_and_writes_nothing(app: rw.App,
                                                                          store_url: str) -> None:
    typo = runwright("submit", CLI_APP, "--json", '{"task": "double", "args": {"n": 1}, "delya_s": 60}',
                     url=store_url)
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == [
        "error: InvalidInput: --json: unknown key 'delya_s' (did you mean 'delay_s'?); the keys are "
        "task, args, key, priority, delay_s, run_at, queue, thread, on_busy, on_conflict, budget, "
        "traceparent"]
    old = runwright("submit", CLI_APP, "--json", '{"type": "double", "args": {"n": 1}}', url=store_url)
    assert old.returncode == 2
    assert old.stderr.startswith("error: InvalidInput: --json: unknown key 'type' (the job type is "
                                 "given as 'task')") and len(old.stderr.splitlines()) == 1
    assert await app.store.run_count_by_state(RunCountParams()) == {}


async def test_submit_run_at_from_json_and_from_the_option(app: rw.App, store_url: str) -> None:
    when = "2031-02-03T04:05:06+02:00"
    expected = dt.datetime.fromisoformat(when).timestamp()
    document = {"task": "double", "args": {"n": 1}, "key": "j", "run_at": when, "priority": 1,
                "queue": "q1"}
    from_json = runwright("submit", CLI_APP, "--json", json.dumps(document), url=store_url)
    assert from_json.returncode == 0, from_json.stderr
    by_option = runwright("submit", CLI_APP, "double", "--args", '{"n": 2}', "--key", "o",
                          "--run-at", "2031-02-03T02:05:06Z", url=store_url)
    assert by_option.returncode == 0, by_option.stderr
    epoch = runwright("submit", CLI_APP, "double", "--args", '{"n": 3}', "--key", "e",
                      "--run-at", str(expected), url=store_url)
    assert epoch.returncode == 0, epoch.stderr
    runs = {run.key: run for run in await app.store.run_list(RunListParams())}
    assert {key: run.run_at for key, run in runs.items()} == {"j": expected, "o": expected, "e": expected}
    assert (runs["j"].priority, runs["j"].queue) == (1, "q1")
    naive = runwright("submit", CLI_APP, "double", "--args", '{"n": 4}', "--run-at", "2031-02-03T04:05:06",
                      url=store_url)
    assert naive.returncode == 2
    assert naive.stderr.splitlines() == ["error: InvalidTime: run_at '2031-02-03T04:05:06' has no time "
                                         "zone; add Z or an offset such as +02:00"]
    assert len(await app.store.run_list(RunListParams())) == 3


async def test_submit_to_a_thread_with_a_busy_policy_as_options_or_json(app: rw.App, store_url: str) -> None:
    first = submitted(store_url, "double", '{"n": 1}', "--thread", "chat", "--delay-s", "3600")
    busy = runwright("submit", CLI_APP, "double", "--args", '{"n": 2}', "--thread", "chat", url=store_url)
    assert busy.returncode == 2 and busy.stderr.splitlines() == [
        f"error: ThreadBusy: thread 'chat' is busy with run {first} (queued); submit with on_busy='enqueue', "
        f"'interrupt' or 'rollback' to queue behind it or stop it"]
    behind = submitted(store_url, "double", '{"n": 2}', "--thread", "chat", "--on-busy", "enqueue")
    # The same through --json, and an option beside it wins over the document's key (which,
    # the thread being busy, would be a ThreadBusy); --args beside it, over its args.
    document = json.dumps({"task": "double", "args": {"n": 3}, "thread": "chat", "on_busy": "reject"})
    from_json = runwright("submit", CLI_APP, "--json", document, "--on-busy", "interrupt", "--args",
                          '{"n": 30}', url=store_url)
    assert from_json.returncode == 0, from_json.stderr
    runs = {run.id: run for run in await app.list_runs(thread="chat")}
    assert set(runs) == {first, behind, int(from_json.stdout.split()[1])}
    assert runs[int(from_json.stdout.split()[1])].arguments() == {"n": 30}
    # One check for both ways in: what the library refuses, named the same.
    for options in (["--on-busy", "enqueue"], ["--thread", "chat", "--on-busy", "later"]):
        refused = runwright("submit", CLI_APP, "double", "--args", '{"n": 4}', *options, url=store_url)
        as_json = runwright("submit", CLI_APP, "--json", json.dumps(
            {"task": "double", "args": {"n": 4}, **{o[2:].replace("-", "_"): v
                                                   for o, v in zip(options[::2], options[1::2])}}),
            url=store_url)
        assert refused.returncode == as_json.returncode == 2
        assert refused.stderr == as_json.stderr and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith("error: InvalidInput: on_busy must be one of reject, enqueue, "
                                     "interrupt, rollback, steer, got 'later'")
    assert len(await app.list_runs()) == 3
    # steer: no agent runs on the thread, so the run waits its turn, as an enqueue.
    steered = submitted(store_url, "double", '{"n": 5}', "--thread", "chat", "--on-busy", "steer")
    assert (await app.store.run_get(steered)).state is rw.RunState.QUEUED


async def test_submit_checks_the_arguments_against_the_tasks_hints(app: rw.App, store_url: str) -> None:
    """Refused in one line naming the argument (exit 2, nothing written); what fits is
    coerced, and a worker process rebuilds a model argument from the stored JSON."""
    refused = runwright("submit", CLI_APP, "price", "--args",
                        '{"order": {"sku": "a", "qty": "two", "due": "2026-12-01T09:00:00Z"}}', url=store_url)
    assert refused.returncode == BAD_INPUT
    assert refused.stderr.splitlines() == [
        "error: BadArguments: task 'price': argument 'order.qty': Input should be a valid integer, unable to "
        "parse string as an integer (got 'two')"]
    await _nothing_written(app)
    order = '{"order": {"sku": "a", "qty": "3", "due": "2026-12-01T09:00:00Z"}, "rate": "0.5"}'
    with worker_process(store_url):
        done = runwright("submit", CLI_APP, "price", "--args", order, "--wait", url=store_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.split("\n", 1)[1]) == {"received": ["Order", "datetime"], "total": 1.5,
                                                         "weekday": "Tuesday"}
    (run,) = await app.store.run_list(RunListParams())
    assert run.arguments() == {"order": {"sku": "a", "qty": 3, "due": "2026-12-01T09:00:00Z"}, "rate": 0.5}


async def _nothing_written(app: rw.App) -> None:
    assert await app.store.run_count_by_state(RunCountParams()) == {}


async def test_submit_wait_says_when_no_live_worker_serves_the_task_and_times_out(
        app: rw.App, store_url: str) -> None:
    with worker_process(store_url, "--queues", "other"):
        await wait_until(app.store.worker_list, "the worker on queue 'other' registered")
        unserved = runwright("submit", CLI_APP, "double", "--args", '{"n": 4}', "--wait",
                             "--timeout-s", "2", url=store_url)
        assert unserved.returncode == 6, unserved.stderr
        run_id = unserved.stdout.split()[1]
        assert unserved.stderr.splitlines() == [
            f"warning: no live worker registers task 'double' on queue 'default': run {run_id} "
            f"waits until one starts (runwright worker MODULE:APP --queues default)",
            f"error: run {run_id} did not end within 2 s and goes on (runwright follow {run_id}): no live "
            f"worker runs task 'double' on queue 'default': start one (runwright worker MODULE:APP --queues "
            f"default)"]
        served = runwright("submit", CLI_APP, "double", "--args", '{"n": 5}', "--queue", "other",
                           "--wait", "--timeout-s", "100", url=store_url)
        assert served.returncode == 0, served.stderr
        assert served.stderr == "" and served.stdout.splitlines()[-1] == "10"
    assert (await app.get(int(run_id))).state is rw.RunState.QUEUED  # it goes on waiting


async def test_a_worker_that_died_without_deregistering_is_not_a_live_one(app: rw.App,
                                                                          store_url: str) -> None:
    stale = app.now() - 3600
    await app.store.worker_register(WorkerRegisterParams("gone", 1, ["default"], ["double"], now=stale))
    unserved = runwright("submit", CLI_APP, "double", "--args", '{"n": 1}', "--wait", "--timeout-s", "1",
                         url=store_url)
    assert unserved.returncode == 6
    assert unserved.stderr.startswith("warning: no live worker registers task 'double' on queue 'default'")


# -- show, JSON, pipes -------------------------------------------------------------------


async def test_show_prints_the_traceback_of_a_failed_run(app: rw.App, store_url: str) -> None:
    with worker_process(store_url):
        failed = runwright("submit", CLI_APP, "explode", "--args", '{"reason": "no fuel"}', "--wait",
                           url=store_url)
    assert failed.returncode == 1
    run_id = failed.stdout.split()[1]
    shown = runwright("show", run_id, url=store_url)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "Traceback (most recent call last):" in text
    assert "in _inner_frame_of_explode" in text and 'raise ValueError(f"explode: {reason}")' in text
    assert text.rstrip().splitlines()[-1] == "ValueError: explode: no fuel"
    as_json = json.loads(runwright("show", run_id, "--json", url=store_url).stdout)
    assert as_json["run"]["state"] == "dead" and as_json["run"]["error"]["type"] == "ValueError"
    assert "_inner_frame_of_explode" in as_json["run"]["error"]["traceback"]
    assert [a["outcome"] for a in as_json["attempts"]] == ["dead"]


async def test_fork_makes_a_run_from_a_step_with_changed_arguments_and_refuses_in_one_line(
        app: rw.App, store_url: str) -> None:
    with worker_process(store_url):
        done = runwright("submit", CLI_APP, "double", "--args", '{"n": 2}', "--wait", url=store_url)
        assert done.returncode == 0, done.stderr
        original = int(done.stdout.split()[1])
        forked = runwright("fork", str(original), "--from-step", "0", "--args", '{"n": 5}', "--key", "f1",
                           "--app", CLI_APP, url=store_url)
        assert forked.returncode == 0, forked.stderr
        said = rf"run (\d+) forked from run {original} \(key f1, state queued\)\n"
        assert re.fullmatch(said, forked.stdout)
        fork = await app.get(int(forked.stdout.split()[1]))
        assert (fork.run.forked_from, fork.arguments()) == (original, {"n": 5})
        assert await fork.result(timeout_s=60) == 10
    assert f"forked from {original}" in runwright("show", str(fork.id), url=store_url).stdout
    again = runwright("fork", str(original), "--from-step", "0", "--args", '{"n": 5}', "--key", "f1",
                      url=store_url)
    assert again.returncode == 0 and again.stdout.startswith(f"run {fork.id} exists from run {original}")
    for argv, code, line in (
            (["--from-step", "1"], BAD_INPUT, f"error: InvalidInput: from_step=1 is past the end of run "
                                              f"{original}'s journal (it holds no step yet: fork from 0)"),
            (["--from-step", "0", "--app", CLI_APP, "--args", '{"n": "two"}'], BAD_INPUT,
             "error: BadArguments: task 'double': argument 'n'")):
        refused = runwright("fork", str(original), *argv, url=store_url)
        assert (refused.returncode, refused.stdout) == (code, "")
        (only,) = refused.stderr.splitlines()
        assert only.startswith(line), refused.stderr
    assert [run.id for run in await app.forks(original)] == [fork.id]


async def test_listing_commands_print_json_for_scripts(app: rw.App, store_url: str) -> None:
    run_id = submitted(store_url, "double", '{"n": 21}', "--key", "k-json", "--delay-s", "3600")
    created = runwright("schedules", "create", "hourly", "--app", CLI_APP, "--task", "double",
                        "--cron", "0 * * * *", "--args", '{"n": 1}', "--json", url=store_url)
    assert json.loads(created.stdout)["name"] == "hourly", created.stderr
    worker_id = await app.store.worker_register(WorkerRegisterParams("h", os.getpid(), ["default"],
                                                                     ["double"]))

    def listed(*args: str) -> object:
        done = runwright(*args, "--json", url=store_url)
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout)

    (run,) = listed("runs")
    assert (run["id"], run["key"], run["state"], run["args"]) == (run_id, "k-json", "queued", {"n": 21})
    assert listed("dead") == []
    status = listed("status")
    assert status["queued"] == 1 and status["workers_alive"] == 1
    (worker,) = listed("workers")
    assert (worker["id"], worker["tasks"], worker["queues"]) == (worker_id, ["double"], ["default"])
    (schedule,) = listed("schedules")
    assert (schedule["name"], schedule["cron"], schedule["args"]) == ("hourly", "0 * * * *", {"n": 1})
    shown = listed("show", str(run_id))
    assert shown["run"]["id"] == run_id
    events = runwright("events", str(run_id), "--json", url=store_url)
    assert [json.loads(line)["kind"] for line in events.stdout.splitlines()] == ["submitted"]
    missing = runwright("thread", "show", "no-such-thread", "--json", url=store_url)
    assert (missing.returncode, missing.stdout) == (5, ""), missing.stderr  # as `show` of no run
    assert missing.stderr == "error: ThreadNotFound: thread 'no-such-thread' does not exist\n"
    threaded = await app.store.run_insert_threaded(RunInsertParams(key="k-chat", task="double", args="{}",
                                                                   thread="chat", on_busy="enqueue"))
    thread = listed("thread", "show", "chat")
    assert (thread["thread"], [run["id"] for run in thread["runs"]], thread["messages"]) == (
        "chat", [threaded.id], [])


# An epoch second of these decades (10 digits from 1), alone or with a fraction, or Python's
# own words for a flag or for nothing: what a table for people must never show.
RAW = re.compile(r"(?<![\w.])1\d{9}(\.\d+)?(?![\w.])|\b(True|False|None)\b")


async def test_tables_show_instants_in_utc_and_flags_as_words(app: rw.App, store_url: str) -> None:
    from runwright.client._why import utc

    created = runwright("schedules", "create", "nightly", "--app", CLI_APP, "--task", "double", "--cron",
                        "0 9 * * *", "--tz", "Europe/Paris", "--args", '{"n": 1}', url=store_url)
    assert created.returncode == 0, created.stderr
    with worker_process(store_url):
        asked = submitted(store_url, "ask", '{"text": "Ship it?"}', "--thread", "chat")
        doubled = submitted(store_url, "double", '{"n": 2}', "--wait")
        failed = runwright("submit", CLI_APP, "explode", "--args", '{"reason": "r"}', "--wait", url=store_url)
        assert failed.returncode == 1, failed.stderr
        await wait_until(lambda: app.questions(asked), "the run asked its question")
        outputs = {" ".join(args): runwright(*args, url=store_url, env={"COLUMNS": "250"}) for args in (
            ["runs"], ["show", str(asked)], ["show", str(doubled)], ["events", str(asked)], ["status"],
            ["workers"], ["thread", "list"], ["thread", "show", "chat"], ["questions"], ["schedules"],
            ["dead"], ["fleet", "workers"])}
    for command_, done in outputs.items():
        assert done.returncode == 0, (command_, done.stderr)
        assert not RAW.search(done.stdout), (command_, RAW.search(done.stdout), done.stdout)
    ask_run, double_run = await app.get(asked), await app.get(doubled)
    assert utc(ask_run.run.created_at) in outputs["runs"].stdout
    assert f"started {utc(double_run.run.started_at)}" in outputs[f"show {doubled}"].stdout
    assert f"finished {utc(double_run.run.finished_at)}" in outputs[f"show {doubled}"].stdout
    assert "finished -" in outputs[f"show {asked}"].stdout  # not None
    parked = next(line for line in outputs[f"events {asked}"].stdout.splitlines() if " parked " in line)
    assert re.match(r"\s*\d+ \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z parked +\{\"until\":\"\d{4}-\d\d-\d\dT"
                    r"\d\d:\d\d:\d\dZ\",\"reason\":\"answer\"\}$", parked), parked
    (question,) = await app.questions(asked)
    assert utc(question.asked_at) in outputs["questions"].stdout
    (schedule,) = await app.list_schedules()
    assert utc(schedule.next_fire_at) in outputs["schedules"].stdout
    assert re.search(r"T09:00:00\+0[12]:00", outputs["schedules"].stdout)  # in its zone, with its offset
    assert re.search(r"throughput estimated +│ no", outputs["status"].stdout), outputs["status"].stdout
    (thread,) = await app.list_threads()
    assert utc(thread.created_at) in outputs["thread list"].stdout
    # For scripts, --json keeps the records' own values: epoch seconds, true/false/null.
    (listed,) = [r for r in json.loads(runwright("runs", "--json", url=store_url).stdout) if r["id"] == asked]
    assert listed["created_at"] == ask_run.run.created_at and listed["finished_at"] is None
    # Why a queued run waits: a column of the list, a line of `show`, a filter, and in JSON.
    (row,) = [line for line in outputs["runs"].stdout.splitlines() if line.startswith(f"│ {asked} ")]
    assert "│ answer " in row, row
    assert "waiting: it waits for a person's answer" in outputs[f"show {asked}"].stdout
    waiting = runwright("runs", "--waiting", "answer", "--json", url=store_url)
    assert [(r["id"], r["waiting"]["reason"], r["waiting"]["until"]) for r in json.loads(waiting.stdout)] == [
        (asked, "answer", None)]
    assert json.loads(runwright("runs", "--waiting", "sleep", "--json", url=store_url).stdout) == []
    bad = runwright("runs", "--waiting", "napping", url=store_url)
    assert (bad.returncode, bad.stderr.count("\n")) == (BAD_INPUT, 1), bad.stderr
    assert "waiting must be one of sleep, answer" in bad.stderr


async def test_thread_list_shows_every_tenants_threads_newest_first(app: rw.App, store_url: str) -> None:
    long_name = "support-" + "x" * 80
    made = [await app.store.run_insert_threaded(RunInsertParams(
        key=f"k{i}", task="double", args="{}", thread=thread, tenant=tenant, on_busy="enqueue", now=1e9 + i))
        for i, (tenant, thread) in enumerate([("alice", "chat"), (None, "ops"), ("bob", long_name),
                                              ("alice", "gone")])]
    assert await app.store.thread_delete(ThreadDeleteParams("gone", "alice"))

    def listed(*args: str) -> list[dict]:
        done = runwright("thread", "list", *args, "--json", url=store_url)
        assert done.returncode == 0, (args, done.stderr)
        return json.loads(done.stdout)

    every = listed()
    assert [(t["tenant"], t["thread"]) for t in every] == [("bob", long_name), (None, "ops"),
                                                           ("alice", "chat")]
    assert every[0]["created_at"] == 1e9 + 2 and every[0]["busy"] is True and every[0]["runs"] == 1
    assert every[0]["last_run_id"] == made[2].id and every[0]["last_run_state"] == "queued"
    assert [t["thread"] for t in listed("--tenant", "alice")] == ["chat"]
    assert [t["thread"] for t in listed("--limit", "1")] == [long_name]
    assert [(t["thread"], t["deleted"]) for t in listed("--tenant", "alice", "--deleted")] == [
        ("gone", True), ("chat", False)]
    table = runwright("thread", "list", url=store_url, env={"COLUMNS": "80"})
    assert table.returncode == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if line.startswith(f"│ {long_name} ")]
    assert "bob" in row and str(made[2].id) in row and "busy" in row  # whole when piped
    refused = runwright("thread", "list", "--limit", "0", url=store_url)
    assert refused.returncode == BAD_INPUT and "limit" in refused.stderr and "Traceback" not in refused.stderr


async def test_tables_are_whole_when_piped(app: rw.App, store_url: str) -> None:
    """Rich lays a table out to 80 columns without a terminal, cutting cells; a pipe gets
    every row whole, on one line, and text that looks like Rich markup as it was written."""
    run_id = submitted(store_url, "double", '{"n": 1}')
    worker_id = await app.store.worker_register(WorkerRegisterParams("h", os.getpid(), ["default"],
                                                                     ["double"]))
    (claimed,) = await app.store.run_claim(RunClaimParams(worker_id, ["default"], ["double"], 1, 30))
    message = "the upstream said [bold]no[/bold]: " + " ".join(f"reason-{i}" for i in range(40))
    error = json.dumps({"type": "Upstream", "message": message})
    await app.store.run_finish_many([RunFinishParams(claimed.id, claimed.fence, rw.RunState.DEAD,
                                                     error=error)])
    for args in (["runs"], ["dead"]):
        done = runwright(*args, url=store_url, env={"COLUMNS": "80"})
        assert done.returncode == 0, done.stderr
        (row,) = [line for line in done.stdout.splitlines() if line.startswith(f"│ {run_id} ")]
        assert f"Upstream: {message}" in row and "double" in row


# -- serve ------------------------------------------------------------------------------


def test_serve_prints_where_it_listens_and_a_port_in_use_is_exit_7(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runwright.db'}"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    server = subprocess.Popen([sys.executable, "-m", "runwright", "serve", CLI_APP, "--port", "0",
                               "--url", url], cwd=ROOT, env={**env, "RUNWRIGHT_AUTH": "off"},
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        lines = _first_lines(server.stdout, 4)  # printed once it listens
        (base,) = re.findall(r"^listening on +(http://127\.0\.0\.1:\d+)\n$", lines[0])
        assert lines[1:] == [f"dashboard     {base}/\n", f"API docs      {base}/docs\n",
                             f"OpenAPI       {base}/openapi.json\n"]
        assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
        assert httpx.get(f"{base}/docs", timeout=30).status_code == 200
        port = base.rsplit(":", 1)[1]
        taken = runwright("serve", CLI_APP, "--port", port, url=url, env={"RUNWRIGHT_AUTH": "off"})
        assert taken.returncode == 7, taken.stderr
        assert taken.stderr.splitlines() == [f"error: cannot listen on 127.0.0.1:{port}: Address already in "
                                             f"use (choose another with --port, or stop what listens there)"]
        assert taken.stdout == ""
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        if server.stdout is not None:
            server.stdout.close()


def test_serve_operator_decode_without_the_payload_keys_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runwright.db'}"
    refused = runwright("serve", CLI_APP, "--port", "0", "--operator-decode", url=url,
                        env={"RUNWRIGHT_AUTH": "off"})
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == ["error: --operator-decode needs the payload keys (the app's "
                                           "Codecs(keys=...) or RUNWRIGHT_PAYLOAD_KEYS): this process has "
                                           "none to decode with"]


def _first_lines(stream: IO[str], count: int, timeout_s: float = 120) -> list[str]:
    """The first `count` lines of `stream`; a server that never prints fails the test
    (at the deadline, which only ends a broken test) instead of hanging it."""
    reader = ThreadPoolExecutor(1)
    try:
        return reader.submit(lambda: [stream.readline() for _ in range(count)]).result(timeout_s)
    finally:
        reader.shutdown(wait=False)  # a reader still blocked ends when the server is stopped


# -- imports ----------------------------------------------------------------------------

HEAVY = ("openai", "fastapi", "uvicorn", "starlette", "httpx")


@pytest.mark.parametrize("program", [["-c", "import runwright"], ["-m", "runwright", "--help"],
                                     ["-m", "runwright", "status", "--help"]], ids=" ".join)
def test_import_and_help_load_no_model_sdk_and_no_web_stack(program: list[str]) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", *program], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
    assert "runwright" in loaded
    assert sorted(name for name in loaded if name.split(".")[0] in HEAVY) == []
    assert not any(name.startswith("runwright.server") for name in loaded)


def test_serve_refuses_to_start_with_a_task_whose_hints_cannot_be_checked(tmp_path: Path) -> None:
    """One line and exit 2 at the start, never a 500 at the task's first submission."""
    (tmp_path / "badhints.py").write_text(
        "from __future__ import annotations\nimport runwright as rw\napp = rw.App('sqlite:///./x.db')\n\n"
        "@app.task\nasync def never(ctx: rw.Context, item: NoSuchType) -> None:\n    return None\n")
    refused = runwright("serve", "badhints:app", "--port", "0", cwd=tmp_path, env={"RUNWRIGHT_AUTH": "off"},
                        timeout_s=60)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        "error: ConfigError: task 'never': the type hint of argument 'item' ('NoSuchType') cannot be "
        "resolved: name 'NoSuchType' is not defined; define what it names at the top level of the module "
        "'badhints'"]


async def test_limits_weight_sets_and_unsets_a_fair_keys_weight_and_refuses_in_one_line(
        app: rw.App, store_url: str) -> None:
    done = runwright("limits", "weight", "tenants:acme", "3", url=store_url)
    assert (done.returncode, done.stdout.strip()) == (0, "fair key tenants:acme: weight 3"), done.stderr
    assert (await app.store.limit_overrides()) == {"fair/tenants:acme": 3}
    listed = runwright("limits", url=store_url, env={"COLUMNS": "200"})
    assert listed.returncode == 0 and "fair keys' weights" in listed.stdout, listed.stdout
    assert any(line.split() == ["│", "tenants:acme", "│", "3", "│"] for line in listed.stdout.splitlines()), \
        listed.stdout
    as_json = runwright("limits", "--json", url=store_url)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"limits": [], "weights": {"tenants:acme": 3}}
    assert runwright("limits", "unweight", "tenants:acme", url=store_url).returncode == 0
    assert (await app.store.limit_overrides()) == {}
    for args, says in ((["weight", "tenants:acme", "0"], "weight is an int in 1..10000"),
                       (["weight", "tenants"], "needs the W"),
                       (["unweight", "tenants", "2"], "takes no number"),
                       (["weight", "a b", "2"], "its name is")):
        done = runwright("limits", *args, url=store_url)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, (args, done.stderr)
        assert says in done.stderr, (args, done.stderr)
