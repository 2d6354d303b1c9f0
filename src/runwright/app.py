"""App: the public face. It composes the parts each role needs and hands them out.

- the registry of tasks, tools, agents and schedules (`registry`);
- the run operations of the operator's scope, every tenant's runs (`scope.RunScope`,
  which the App is), and a tenant's view of them (`app.tenant(name)`);
- schedule operations (`scheduling`), thread operations (`threads`), the follower of
  logs and ends (`following`);
- workers, given the registry, the store, the clock and the limits (`runtime`), never
  the App;
- the fleet bus of its processes (`fleet`, under `{namespace}:v{major of version}`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .agents._loop import define_agent
from .agents._rate_limits import RateLimit
from .client._following import Follower
from .client._scheduling import Schedules
from .client._scope import Call, RunScope, TenantView
from .client._threads import Threads
from .core import _inputs as inputs
from .core._clock import Clock, StoreClock
from .core._payloads import Codecs, install_keys
from .core._schedules import Schedule
from .core._versions import DEFAULT_VERSION, check_version, major_of
from .engine._runtime import Runtime
from .errors import ConfigError
from .fleet import Fleet, FleetSettings
from .jobs import register_builtin_jobs
from .store import Store, store_from_url
from .store._fair_rules import weights_set
from .store._params import LimitSetParams, LimitUse
from .tasks._concurrency import check_limit_max, check_limit_target
from .tasks._fair import check_weight, weight_target
from .tasks._limits import Limits
from .tasks._registry import Registry
from .tasks._serde import DEFAULT_MAX_PAYLOAD_BYTES
from .tasks._specs import TaskSpec
from .verify._hooks import register as register_verify

if TYPE_CHECKING:
    from .agents._models import Model
    from .agents._tools import Toolset, ToolSpec
    from .engine._worker import Worker
    from .fleet import Member

__all__ = ["App", "Call", "TenantView"]


class App(RunScope):
    """Registry of tasks and the face of one store.

    `App()` uses RUNWRIGHT_URL, else `sqlite:///./runwright.db`. It connects lazily, on
    first use, and creates or upgrades the schema unless `auto_migrate=False` (then run
    `runwright migrate`; a SQLite file that does not exist is then refused, not created).
    A newer schema than this code knows is refused either way.
    The built-in job types (`webhook`, `llm`, `chain`), and the workload `runwright verify
    --fleet` runs on the app's workers, are registered unless `builtin_jobs=False`.
    `clock` defaults to the store's. `version` is the app's semantic version (defaults to
    "0.0.0"); its major names the fleet its processes join: two majors are two fleets.
    `codecs` (`rw.Codecs`) compresses and encrypts payloads (arguments, results, step
    results, event data) as they are stored; defaults to RUNWRIGHT_PAYLOAD_* (see
    `Codecs.from_env`), else none: payloads stay plain JSON.
    """

    def __init__(self, url: str | None = None, *, auto_migrate: bool = True,
                 max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, builtin_jobs: bool = True,
                 clock: Clock | None = None, version: str = DEFAULT_VERSION,
                 codecs: Codecs | None = None) -> None:
        self.version = check_version(version)
        if codecs is not None and not isinstance(codecs, Codecs):
            raise ConfigError(f"codecs is a runwright.Codecs, got {type(codecs).__name__}")
        self.codecs = codecs if codecs is not None else Codecs.from_env()
        # Every process opens what any other sealed: the keys go to the process's keyring.
        install_keys(self.codecs)
        self.store: Store = store_from_url(url)
        self.url = self.store.url
        self.url_from_env = url is None  # RUNWRIGHT_URL (a command's --url), else the default
        self.auto_migrate = auto_migrate
        self.registry = Registry(self.version)
        # `@app.task` / `@app.task(retries=5, ...)` and `@app.tool`: the registry's own,
        # typed as it types them (see `Registry.task` and `Registry.tool`).
        self.task = self.registry.task
        self.tool = self.registry.tool
        self.runtime = Runtime(self.registry, self.store, clock or self.store.clock,
                               Limits(max_payload_bytes, codecs=_sealing(self.codecs)))
        follower = Follower(self.store)
        super().__init__(self.runtime, follower, Threads(self.store, follower), self.open, tenant=None)
        self._schedules = Schedules(self.registry, self.store, self.runtime.clock, self.runtime.limits)
        self._opened: asyncio.Task[list[int]] | None = None
        self.fleet = Fleet(self.store, FleetSettings.from_env(major_of(self.version)), self.open,
                           url_from_env=url is None)
        # `@app.on_fleet("reload-config")`, and the cache `evict-cache` evicts.
        self.on_fleet = self.fleet.on
        self.cache = self.fleet.cache
        if builtin_jobs:
            register_builtin_jobs(self.registry)
        # Verify's fleet ops in every App, its workload with the built-in jobs: through the
        # hooks a user has, so the engine and the fleet know nothing of it.
        register_verify(self.registry, self.fleet, workload=builtin_jobs)
        self.registry.built_in = frozenset(self.registry.tasks)

    def __repr__(self) -> str:
        return f"<App {self.url} tasks={sorted(self.tasks)}>"

    def tenant(self, name: str) -> TenantView:
        """This app as tenant `name` sees it: its runs, keys and threads only."""
        inputs.tenant(name)  # InvalidInput (a ValueError) for a name no tenant may have
        return TenantView(self.runtime, self._follower, self._threads, self.open, tenant=name)

    # -- registry -------------------------------------------------------------------

    @property
    def tasks(self) -> dict[str, TaskSpec]:
        return self.registry.tasks

    @property
    def tools(self) -> dict[str, ToolSpec]:
        return self.registry.tools

    @property
    def max_payload_bytes(self) -> int:
        return self.runtime.limits.max_payload_bytes

    def agent(self, name: str, *, model: str | Model, tools: Sequence[ToolSpec | str | Toolset] = (),
              instructions: str = "", max_turns: int = 10, stream: bool = False,
              prices: Mapping[str, Any] | None = None, snapshot_every: int = 20,
              **task_options: Any) -> TaskSpec:
        """Register an agent: a task `name(input: str)` that loops model call -> tool calls
        -> model call, each journaled, until the model answers without tool calls or a
        bound is hit. Submit it like any task; `budget=` bounds cost, time and turns.
        `tools` may hold an MCP server's (`runwright.integrations.mcp.MCPServer`).
        Every `snapshot_every` turns it saves its conversation, so a resume replays only
        the turns since. `model`: "provider:model", or any `agents.models.Model` (in tests,
        `runwright.testing.ScriptedModel`)."""
        return define_agent(self.registry, name, model=model, tools=tools, instructions=instructions,
                            max_turns=max_turns, stream=stream, prices=prices,
                            snapshot_every=snapshot_every, **task_options)

    def rate_limit(self, model: str, *, requests_per_min: float | None = None,
                   tokens_per_min: float | None = None, burst_s: float = 60.0) -> RateLimit:
        """Keep every call of `model` ("openai:gpt-4o-mini"), by any agent or llm job on any
        worker, within a provider's quota: token buckets in the store, shared by all
        workers. A call whose turn is more than a second away parks its run (no slot
        held). `burst_s`: seconds' worth of the quota that may go at once. Declare it in
        every worker's app, like the tasks."""
        limit = RateLimit(requests_per_min, tokens_per_min, burst_s)
        self.registry.rate_limits[model] = limit
        return limit

    def task_spec(self, task: TaskSpec | str) -> TaskSpec:
        return self.registry.task_spec(task)

    def on_close(self, closer: Any) -> None:
        """Run `closer` (an async callable) when the app closes."""
        self.registry.on_close(closer)

    # -- schedules (the deployment's: only the App changes them) --------------------

    @property
    def schedules(self) -> dict[str, Schedule]:
        """The schedules declared in code (`list_schedules` reads the stored ones)."""
        return self.registry.schedules

    def schedule(self, name: str, *, cron: str, task: TaskSpec | str,
                 args: Mapping[str, Any] | None = None, tz: str = "UTC", misfire: str = "skip",
                 catch_up_limit: int = 10, queue: str | None = None,
                 priority: int | None = None) -> Schedule:
        """Declare a schedule in code; every worker saves it at start and any may fire it.
        `cron` is croniter syntax (an optional seconds field comes last), in time zone `tz`.
        `misfire`: "skip" (a fire missed by more than a minute is skipped) or "catch_up"
        (missed fires are run, the latest `catch_up_limit` of them)."""
        return self.registry.declare_schedule(self.schedule_spec(
            name, cron=cron, task=task, args=args, tz=tz, misfire=misfire,
            catch_up_limit=catch_up_limit, queue=queue, priority=priority))

    def schedule_spec(self, name: str, *, cron: str, task: TaskSpec | str,
                      args: Mapping[str, Any] | None, tz: str, misfire: str, catch_up_limit: int,
                      queue: str | None, priority: int | None) -> Schedule:
        """A checked Schedule (malformed cron, unknown zone or task, bad args: InvalidInput)."""
        return self._schedules.define(name, cron=cron, task=task, args=args, tz=tz, misfire=misfire,
                                      catch_up_limit=catch_up_limit, queue=queue, priority=priority)

    async def save_schedule(self, schedule: Schedule, now: float | None = None) -> Schedule:
        """Store a schedule (created or redefined at run time, or declared in code)."""
        await self.open()
        return await self._schedules.save(schedule, now)

    async def sync_schedules(self, now: float | None = None) -> None:
        """Save every schedule declared in code (workers do this when they start)."""
        for schedule in self.registry.schedules.values():
            await self.save_schedule(schedule, now)

    async def list_schedules(self) -> list[Schedule]:
        """The stored schedules with their next fire times. The App's alone, like every
        schedule operation: a tenant's view has none (schedules belong to no tenant)."""
        await self.open()
        return await self.store.schedule_list()

    async def pause_schedule(self, name: str) -> None:
        await self.open()
        await self._schedules.pause(name)

    async def resume_schedule(self, name: str, now: float | None = None) -> None:
        """Resume from now on: fires missed while paused are not made up."""
        await self.open()
        await self._schedules.resume(name, now)

    async def delete_schedule(self, name: str) -> None:
        """Delete a stored schedule. One declared in code comes back when a worker starts."""
        await self.open()
        await self._schedules.delete(name)

    # -- lifecycle ------------------------------------------------------------------

    # -- concurrency limits (the operator's: only the App changes them) ---------------

    async def set_limit(self, target: str, max: int | None) -> None:
        """Override the max of a concurrency limit (`rw.Limit`) or a rate (`rw.Rate`, the
        most started in its window) live: `target` is its name (every key of it) or
        "<name>:<key>" (one key, which wins over its name's).
        None removes the override, and the max the runs carry applies again. Kept by the
        store and read at each claim: it holds from the next claim, fleet-wide; runs
        running already go on."""
        check_limit_target(target)
        if max is not None:
            check_limit_max(max)
        await self.open()
        await self.store.limit_set(LimitSetParams(target, max))

    async def set_weight(self, target: str, weight: int | None) -> None:
        """Set the weight of a fair key (`rw.Fair`) live: `target` is a Fair's name (every
        key of it) or "<name>:<key>" (one key, which wins over its name's); `weight` an
        int in 1..10000 (default 1), None removes it. A key with weight 3 is served three
        claims for one of a key with weight 1 while both have runs due. Kept by the store
        and read at each claim: it holds from the next claim, fleet-wide."""
        stored = weight_target(target)
        if weight is not None:
            check_weight(weight)
        await self.open()
        await self.store.limit_set(LimitSetParams(stored, weight))

    async def weights(self) -> dict[str, int]:
        """The weights of fair keys the operator set (`set_weight`), by "<name>" or
        "<name>:<key>"; a key not listed (nor its name) has weight 1."""
        await self.open()
        return weights_set(await self.store.limit_overrides())

    async def limits(self) -> list[LimitUse]:
        """Every key of a concurrency limit or rate with runs running or queued under it:
        its use (a rate's: the cost started in its window now) and the max a claim applies."""
        await self.open()
        return await self.store.limit_list()

    async def open(self) -> App:
        """Connect and check the schema (idempotent; every operation calls it)."""
        await self._connect(migrate=self.auto_migrate)
        return self

    async def migrate(self) -> tuple[list[int], int]:
        """Create or upgrade the schema (numbered migrations; safe to run concurrently):
        the versions applied (none if it was current) and the version it is at."""
        applied = await self._connect(migrate=True)
        return applied, await self.store.schema_version()

    async def check_ready(self) -> None:
        """Raise unless the store answers (what /readyz reports)."""
        await self.store.schema_version()

    async def close(self) -> None:
        await self.fleet.close()
        await self.registry.close_resources()
        if self._opened is not None:
            self._opened = None
            await self.store.close()

    async def __aenter__(self) -> App:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _connect(self, migrate: bool) -> list[int]:
        """Open the store once, however many callers wait. A failure is the failure of
        every caller waiting on that opening, and the next call tries again: a database
        that was down when the process started is used once it is back."""
        if self._opened is None or _failed(self._opened):
            self._opened = asyncio.get_running_loop().create_task(self._open_store(migrate))
        # Shielded: a caller that gives up does not cancel the opening the others await.
        return list(await asyncio.shield(self._opened))

    async def _open_store(self, migrate: bool) -> list[int]:
        try:
            await self.store.open(create=migrate)
            if migrate:
                return await self.store.migrate()
            await self.store.require_schema()
            return []
        except BaseException:
            await self._close_half_open()
            raise

    async def _close_half_open(self) -> None:
        """After a failed opening, so that the next one starts from a closed store; the
        opening's error is the one to report, not one of this close."""
        try:
            await self.store.close()
        except Exception:  # the store is being given up on anyway
            pass

    def use_clock(self, clock: Clock) -> None:
        """Read time from `clock` everywhere: the store's judgements (due times, leases,
        retention), submissions, workers made after this, schedules (runwright.testing's
        clock that skips ahead). A store shared with other processes keeps the server's
        clock (see runwright.core._clock): only the embedded stores take one."""
        if isinstance(self.store.clock, StoreClock):  # the database server's, in its statements
            raise ConfigError(f"{self.url}: only an embedded store (sqlite://, memory://) takes"
                              f" a clock of the App's")
        self.store.clock = clock
        object.__setattr__(self.runtime, "clock", clock)  # frozen for the engine, set here once
        self._schedules.use_clock(clock)

    # -- workers --------------------------------------------------------------------

    def worker(self, **options: Any) -> Worker:
        """A Worker executing this app's tasks; see `runwright.engine._worker.WorkerConfig`."""
        from .engine._worker import Worker, WorkerConfig

        config = WorkerConfig(**options)

        async def join() -> Member:
            return await self.fleet.member_for("worker", config.drain_grace_s)

        return Worker(self.runtime, config, connect=self.open, join_fleet=join)


def store_url_of(url: str) -> str:
    """The URL an App built on `url` reports (`app.url`): the same store, the same text."""
    return store_from_url(url).url


def _failed(opening: asyncio.Task[list[int]]) -> bool:
    return opening.done() and (opening.cancelled() or opening.exception() is not None)


def _sealing(codecs: Codecs | None) -> Codecs | None:
    """The codecs new payloads go through: None when they would change nothing (keys
    given only to read), so the plain path stays the plain path."""
    if codecs is not None and not codecs.changes_nothing:
        return codecs
    return None
