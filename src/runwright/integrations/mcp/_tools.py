"""An MCP server's tools, called by runwright's own agents as journaled steps.

    inventory = MCPServer.stdio("python", "-m", "inventory_server")
    app.agent("support", model="openai:gpt-4o-mini", tools=[inventory, my_tool])

The server is a Toolset (agents/_tools.py): the model sees each of its tools' MCP name,
description and input schema, as the server lists them; the list is fetched when a worker
first needs it (at its first model call with these tools, not at import or submission),
cached for the worker process, and journaled with each model call, so a replayed turn
calls the tools its model saw.

Each call is a step with the delivery the tool's annotations choose
(`runwright.integrations.delivery_from_annotations`: read-only or idempotent ->
idempotent, anything else -> at-most-once) unless `deliveries={"name": ...}` says
otherwise. An idempotent call carries its stable key `run_id:position` in the request's
`_meta`, under `runwright/idempotency_key`. A result's text content (else its structured
content, as JSON) is what the model gets; an error result (`isError`), a protocol error or
an unreachable server becomes an error result the model reads; a run never crashes on one.

One session per server per worker process (per event loop), opened at first use, shared
by the worker's runs, closed with the app. A dead connection (a killed stdio server, a
restarted HTTP one) is opened again, and a call it failed is made again on the new one as
its delivery allows: at-least-once and idempotent calls always; an at-most-once call only
if its request provably never went out (the connection was known dead before the send,
or an HTTP server answered that it no longer knows the session), else the model gets the
ToolOutcomeUnknown result.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
from abc import ABC, abstractmethod
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Mapping, Sequence

from ...agents._tools import DELIVERIES, Delivery, SchemaArguments, ToolSpec, outcome_unknown_result
from ...core._waiting import bounded
from ...errors import ConfigError
from .._delivery import delivery_from_annotations

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["IDEMPOTENCY_META_KEY", "MCPServer"]

IDEMPOTENCY_META_KEY = "runwright/idempotency_key"  # where an idempotent call's key rides in `_meta`
ATTEMPTS = 3  # connections a call may take (a dead one is replaced) before it gives up
RECONNECT_PAUSE_S = 0.2  # between attempts, so a restarting server has a moment
logger = logging.getLogger("runwright.mcp")


class MCPServer:
    """An MCP server whose tools an agent may call. Build one with `MCPServer.stdio` or
    `MCPServer.http` and give it to `app.agent(..., tools=[...])`."""

    def __init__(self, name: str, transport: _Transport, *, deliveries: Mapping[str, str] | None = None,
                 only: Sequence[str] | None = None, timeout_s: float = 60.0) -> None:
        if not name or not isinstance(name, str):
            raise ConfigError(f"MCPServer: name must be a non-empty string, got {name!r}")
        if importlib.util.find_spec("mcp") is None:  # found, not imported: workers import it at first use
            raise ConfigError("MCPServer needs the MCP SDK: pip install 'runwright[mcp]'")
        for tool, delivery in (deliveries or {}).items():
            if delivery not in DELIVERIES:
                raise ConfigError(f"MCPServer {name!r}: tool {tool!r}: delivery must be one of "
                                  f"{', '.join(DELIVERIES)}, got {delivery!r}")
        if not timeout_s > 0:
            raise ConfigError(f"MCPServer {name!r}: timeout_s must be > 0, got {timeout_s!r}")
        self._name = name
        self._transport = transport
        self.deliveries = dict(deliveries or {})
        self.only = None if only is None else frozenset(only)
        self.timeout_s = timeout_s
        self._definitions: list[dict[str, Any]] | None = None  # this process's, once listed
        self._tools: dict[str, tuple[str, ToolSpec]] = {}  # name -> (its definition as JSON, its spec)
        self._connection: _Connection | None = None
        self._opening: tuple[asyncio.AbstractEventLoop | None, asyncio.Lock] | None = None

    @classmethod
    def stdio(cls, command: str, *args: str, env: Mapping[str, str] | None = None, cwd: str | None = None,
              name: str | None = None, deliveries: Mapping[str, str] | None = None,
              only: Sequence[str] | None = None, timeout_s: float = 60.0) -> MCPServer:
        """A server the worker starts as a subprocess (`command args...`) and talks to over
        its stdin/stdout. `env` is added to the SDK's safe default environment."""
        if not command or not isinstance(command, str):
            raise ConfigError(f"MCPServer.stdio: command must be a non-empty string, got {command!r}")
        if not all(isinstance(arg, str) for arg in args):
            raise ConfigError(f"MCPServer.stdio: every argument must be a string, got {list(args)!r}")
        transport = _Stdio(command, list(args), dict(env or {}), cwd)
        return cls(name or " ".join([command, *args]), transport, deliveries=deliveries, only=only,
                   timeout_s=timeout_s)

    @classmethod
    def http(cls, url: str, *, headers: Mapping[str, str] | None = None, name: str | None = None,
             deliveries: Mapping[str, str] | None = None, only: Sequence[str] | None = None,
             timeout_s: float = 60.0) -> MCPServer:
        """A server at `url` over streamable HTTP; `headers` go with every request
        (e.g. `{"Authorization": "Bearer ..."}`)."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"MCPServer.http: url must be an http:// or https:// URL, got {url!r}")
        return cls(name or url, _Http(url, dict(headers or {})), deliveries=deliveries, only=only,
                   timeout_s=timeout_s)

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"MCPServer({self._name!r})"

    # -- the Toolset -------------------------------------------------------------------------

    async def definitions(self) -> list[dict[str, Any]]:
        """The server's tools as it lists them (name, description, inputSchema,
        annotations), listed once per worker process."""
        if self._definitions is None:
            listed = await self._with_connection(_list_tools)
            self._definitions = [d for d in listed if self.only is None or d["name"] in self.only]
        return self._definitions

    def tool(self, definition: dict[str, Any]) -> ToolSpec:
        name = definition["name"]
        text = json.dumps(definition, sort_keys=True)
        known = self._tools.get(name)
        if known is not None and known[0] == text:
            return known[1]
        delivery = delivery_from_annotations(definition.get("annotations"), self.deliveries.get(name))
        owner = f"tool {name!r} of MCP server {self._name!r}"
        schema = definition.get("inputSchema") or {"type": "object"}
        spec = ToolSpec(name, _Caller(self, name, delivery), definition.get("description") or name,
                        delivery, SchemaArguments(owner, schema))
        self._tools[name] = (text, spec)
        return spec

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.loop is _running_loop():
            await connection.close()

    # -- calls -------------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any], delivery: Delivery, key: str | None) -> str:
        """One call of tool `name`; always the text the model gets (see the module's doc)."""
        meta: Any = {IDEMPOTENCY_META_KEY: key} if delivery == "idempotent" and key else None
        failure = ""
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(RECONNECT_PAUSE_S * attempt)
            try:
                connection = await self._connected()
                if delivery == "at_most_once":
                    # A round trip first: a connection that died since its last use (a
                    # killed stdio server) is found dead here, where nothing has gone out.
                    await bounded(connection.session.send_ping(), self.timeout_s)
            except Exception as exc:  # could not connect, or the ping failed: the call did not go out
                if self._connection is not None:
                    self._connection.dead = True
                failure = _describe(exc)
                continue
            try:
                result = await connection.session.call_tool(
                    name, arguments, read_timeout_seconds=self.timeout_s, meta=meta)
            except Exception as exc:
                if not _lost_connection(exc):
                    return _error(f"MCP server {self._name!r} refused the call: {_describe(exc)}")
                failure = _describe(exc)
                connection.dead = True
                if delivery == "at_most_once" and not _never_served(exc):
                    return outcome_unknown_result(
                        name, f"the connection to MCP server {self._name!r} failed mid-call: {failure}")
                continue
            return _result_text(result)
        return _error(f"MCP server {self._name!r} could not be reached ({ATTEMPTS} attempts): {failure}")

    async def _with_connection(self, fn: Any) -> Any:
        """`fn(session)` on a live connection, opened again (a few times) if it dies."""
        failure: Exception | None = None
        for attempt in range(ATTEMPTS):
            if attempt:
                await asyncio.sleep(RECONNECT_PAUSE_S * attempt)
            connection = None
            try:
                connection = await self._connected()
                return await fn(connection.session, self.timeout_s)
            except Exception as exc:
                if connection is not None and not _lost_connection(exc):
                    raise
                if connection is not None:
                    connection.dead = True
                failure = exc
        raise ConnectionError(f"MCP server {self._name!r} could not be reached ({ATTEMPTS} attempts): "
                              f"{_describe(failure) if failure else 'no attempt'}")

    async def _connected(self) -> _Connection:
        """This loop's live connection, opened when there is none or it died. (One of another
        loop, an app used by two loops in turn, is left to that loop.)"""
        loop = _running_loop()
        connection = self._connection
        if connection is not None and connection.loop is loop and connection.alive:
            return connection
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.Lock())  # a lock belongs to a loop too
        async with self._opening[1]:  # one opening at a time: the runs waiting share it
            connection = self._connection
            if connection is not None and connection.loop is loop and connection.alive:
                return connection
            if connection is not None and connection.loop is loop:
                await connection.close()
            self._connection = None
            connection = _Connection(self._transport, self.timeout_s)
            await connection.open()
            self._connection = connection
            return connection


class _Caller:
    """A tool's function: the ToolSpec calls it with the model's (checked) arguments, and
    the key when the delivery is idempotent."""

    def __init__(self, server: MCPServer, name: str, delivery: Delivery) -> None:
        self.server, self.name, self.delivery = server, name, delivery

    async def __call__(self, **arguments: Any) -> str:
        key = arguments.pop("idempotency_key", None) if self.delivery == "idempotent" else None
        return await self.server.call(self.name, arguments, self.delivery, key)


# -- transports and the connection ---------------------------------------------------------

class _Transport(ABC):
    """How a session reaches its server: stdio or streamable HTTP (each subclass says)."""

    @abstractmethod
    def streams(self) -> Any:
        """The transport's async context manager of (read, write) streams."""


class _Stdio(_Transport):
    def __init__(self, command: str, args: list[str], env: dict[str, str], cwd: str | None) -> None:
        self.command, self.args, self.env, self.cwd = command, args, env, cwd

    def streams(self) -> Any:
        from mcp import StdioServerParameters, stdio_client

        return stdio_client(StdioServerParameters(command=self.command, args=self.args, env=self.env,
                                                  cwd=self.cwd))


class _Http(_Transport):
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers

    @asynccontextmanager
    async def streams(self) -> AsyncIterator[Any]:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        # A client given to the transport is the giver's to close (the SDK closes only its own).
        async with create_mcp_http_client(headers=self.headers) as client, \
                streamable_http_client(self.url, http_client=client) as streams:
            yield streams


class _Connection:
    """One initialized session, owned by a task of its own: the SDK's transports and
    sessions are anyio context managers, to be left by the task that entered them, while
    any of the worker's runs sends on the session.

    Its transport's incoming messages pass through a relay that marks the connection dead
    the moment they end (the stdio server exited, the HTTP transport gave up), before the
    session learns of it: a call made after that provably never went out."""

    def __init__(self, transport: _Transport, timeout_s: float) -> None:
        self.transport = transport
        self.timeout_s = timeout_s
        self.loop = _running_loop()
        self.dead = False
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def session(self) -> ClientSession:
        assert self._session is not None
        return self._session

    @property
    def alive(self) -> bool:
        return not self.dead and self._task is not None and not self._task.done()

    async def open(self) -> None:
        self._task = asyncio.create_task(self._run(), name="runwright-mcp-connection")
        waiter = asyncio.ensure_future(self._ready.wait())
        try:
            await asyncio.wait([waiter, self._task], timeout=self.timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not self._ready.is_set():
            await self.close()
            raise ConnectionError(_describe(self._error) if self._error else
                                  f"no session within {self.timeout_s}s")

    async def close(self) -> None:
        self.dead = True
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await bounded(asyncio.shield(self._task), 10)
            except Exception:  # a timeout included
                self._task.cancel()

    async def _run(self) -> None:
        import anyio
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self.transport.streams())
                relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
                group = await stack.enter_async_context(anyio.create_task_group())
                group.start_soon(self._relay, read, relay_in)
                session = await stack.enter_async_context(ClientSession(relay_out, write))
                await session.initialize()
                self._session = session
                self._ready.set()
                await self._stop.wait()
                group.cancel_scope.cancel()
        except BaseException as exc:  # kept for open() to report; the task ends here
            self._error = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            self.dead = True

    async def _relay(self, read: Any, relay_in: Any) -> None:
        async with relay_in:
            try:
                async for item in read:
                    await relay_in.send(item)
            except Exception as exc:  # the transport broke: the same as its end
                logger.debug("MCP transport ended: %s", _describe(exc))
            finally:
                self.dead = True


async def _list_tools(session: ClientSession, timeout_s: float) -> list[dict[str, Any]]:
    from mcp.types import PaginatedRequestParams

    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: Any = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await bounded(session.list_tools(params=params), timeout_s)
        tools += [tool.model_dump(by_alias=True, mode="json", exclude_none=True,
                                  include={"name", "description", "input_schema", "annotations"})
                  for tool in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools


def _lost_connection(exc: BaseException) -> bool:
    """Whether the call failed because the connection did (else the server answered)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    if isinstance(exc, MCPError):
        return exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT) or _never_served(exc)
    return isinstance(exc, (ConnectionError, OSError, TimeoutError)) or \
        type(exc).__module__.startswith(("anyio", "httpx"))


def _never_served(exc: BaseException) -> bool:
    """An HTTP server's 404 for our session: it does not know the session (it restarted),
    so it did not run the call."""
    from mcp.shared.exceptions import MCPError

    return isinstance(exc, MCPError) and exc.message == "Session terminated"


def _result_text(result: Any) -> str:
    """A CallToolResult as the model reads it: its text (what the server wrote for a model;
    the spec has a server put its structured content there too, as JSON), else its
    structured content as JSON; an `isError` result as an error it can act on."""
    parts = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:  # an image, audio, a link: the model gets what it is, not its bytes
            parts.append(json.dumps({"content": kind, "mime_type": getattr(block, "mime_type", None),
                                     "uri": str(getattr(block, "uri", "") or "") or None}))
    text = "\n".join(parts)
    if not text and getattr(result, "structured_content", None) is not None:
        text = json.dumps(result.structured_content, default=str)
    return _error(text or "the tool failed, saying nothing") if result.is_error else text


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _error(message: str) -> str:
    return json.dumps({"error": message})


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
