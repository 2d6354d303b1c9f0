"""Models through any OpenAI-compatible endpoint (the official `openai` SDK).

`"<provider>:<model>"` names a model. The provider's base URL and key come from the
environment: `openai` uses OPENAI_BASE_URL (else the SDK's default) and OPENAI_API_KEY;
any other provider P uses RUNWRIGHT_P_BASE_URL and RUNWRIGHT_P_API_KEY, with defaults for
the well-known ones (groq, ollama). So OpenAI, Groq, vLLM, Ollama and gateways all work.

A call retries 429, 5xx, timeouts and connection errors (a stream cut mid-way among
them) with backoff, honouring Retry-After; any other 4xx is a clear ModelError at once (a
bad request does not get better by repeating it).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from ..errors import ConfigError, FinalError, RunwrightError
from ..tasks._retry import Backoff

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_PRICES", "Model", "ModelClient", "ModelError", "ModelUnavailable", "Price",
           "resolve_model"]

KNOWN_PROVIDERS = {
    "groq": "https://api.groq.com/openai/v1",
    "ollama": "http://127.0.0.1:11434/v1",
}


class ModelError(FinalError):
    """The provider refused the request (a 4xx other than 429): no retry can help."""


class ModelUnavailable(RunwrightError, RuntimeError):
    """The provider kept failing (429, 5xx, timeouts) through every retry of one call.
    Not final: the run's own retry policy decides what comes next."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
}


class Model(Protocol):
    """What an agent calls each turn. `ModelClient` (any OpenAI-compatible endpoint) is the
    one runwright ships; `runwright.testing.ScriptedModel` is another, which replies from
    a script in memory. This seam exists so that such a model plugs into `app.agent(...,
    model=...)` exactly where a real one does: no fake HTTP server, no patching.

    `spec` names the model in the `model` events and keys its rate limit
    (`app.rate_limit(spec, ...)`). `complete` returns `{"message": the assistant's message
    (role, content and/or tool_calls, as chat completions has them), "usage":
    {"prompt_tokens", "completion_tokens"}, "cost_usd", "priced", "model": spec}`."""

    spec: str

    def prepare(self) -> None:
        """Get ready for a call now (build a client), not when the call's turn comes."""

    async def aclose(self) -> None:
        """Let go of connections: the app closes its agents' models."""

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       on_tokens: Callable[[str], Awaitable[None]] | None = None,
                       on_retry: Callable[[int], Awaitable[None]] | None = None) -> dict[str, Any]:
        """One reply to `messages`, with `tools` (chat-completions tool schemas) offered;
        text streamed (an agent with stream=True) goes through `on_tokens`."""


@dataclass(frozen=True, slots=True)
class ModelRef:
    provider: str
    model: str
    base_url: str | None
    api_key: str


def resolve_model(spec: str) -> ModelRef:
    provider, sep, model = spec.partition(":")
    if not sep or not provider or not model:
        raise ConfigError(f"model {spec!r}: name it as provider:model, e.g. openai:gpt-4o-mini")
    if provider == "openai":
        base_url = os.environ.get("OPENAI_BASE_URL")
        api_key = os.environ.get("OPENAI_API_KEY")
    else:
        prefix = f"RUNWRIGHT_{provider.upper()}_"
        base_url = os.environ.get(prefix + "BASE_URL") or KNOWN_PROVIDERS.get(provider)
        api_key = os.environ.get(prefix + "API_KEY") or os.environ.get(f"{provider.upper()}_API_KEY")
        if base_url is None:
            raise ConfigError(f"model {spec!r}: set {prefix}BASE_URL to the provider's "
                              f"OpenAI-compatible endpoint")
    return ModelRef(provider, model, base_url, api_key or "unset")


@dataclass
class ModelClient:
    """One model; `complete` makes one chat-completions call, with retries."""

    spec: str
    prices: dict[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    max_retries: int = 5
    timeout_s: float = 120.0
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.5, factor=2, cap_s=30))

    def __post_init__(self) -> None:
        self.ref = resolve_model(self.spec)
        self._client: openai.AsyncOpenAI | None = None

    @property
    def client(self) -> openai.AsyncOpenAI:
        # Built on first use, inside the worker's event loop; the SDK's own retries are
        # off because ours honour Retry-After and count toward one policy.
        if self._client is None:
            import openai  # here, not at import: the SDK takes 0.4 s to load, paid by every CLI call

            self._client = openai.AsyncOpenAI(base_url=self.ref.base_url, api_key=self.ref.api_key,
                                              max_retries=0, timeout=self.timeout_s)
        return self._client

    def prepare(self) -> None:
        """Build the client now (the SDK takes 0.4 s to load): a call that waited for its
        turn under a rate limit is then made at its turn, not that much later."""
        self.client  # noqa: B018 (built on first access)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       on_tokens: Callable[[str], Awaitable[None]] | None = None,
                       on_retry: Callable[[int], Awaitable[None]] | None = None) -> dict[str, Any]:
        """The assistant's message, the usage and its cost in USD. `on_retry(attempt)` is
        awaited after attempt `attempt` failed and before the next one starts: what that
        attempt streamed through `on_tokens` is void."""
        import httpx
        import openai

        attempt = 1
        while True:
            try:
                return await self._call(messages, tools, on_tokens)
            except (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError,
                    openai.InternalServerError, httpx.TransportError) as exc:
                # httpx.TransportError: a stream cut after its headers is raised by the
                # SDK's iterator as httpx's own error, not wrapped in APIConnectionError.
                if attempt > self.max_retries:
                    raise ModelUnavailable(f"{self.spec}: {_describe(exc)} after "
                                           f"{attempt} attempts") from exc
                if on_retry is not None:
                    await on_retry(attempt)
                await asyncio.sleep(_retry_after_s(exc) or self.backoff.delay_s(attempt))
                attempt += 1
            except openai.APIStatusError as exc:
                raise ModelError(f"{self.spec} refused the request: {_describe(exc)}") from exc

    async def _call(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    on_tokens: Callable[[str], Awaitable[None]] | None) -> dict[str, Any]:
        options: dict[str, Any] = {"model": self.ref.model, "messages": messages}
        if tools:
            options["tools"] = tools
        if on_tokens is None:
            response = await self.client.chat.completions.create(**options)
            message = response.choices[0].message.model_dump(exclude_none=True)
            usage = response.usage.model_dump() if response.usage else {}
        else:
            message, usage = await self._stream(options, on_tokens)
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        price = self.prices.get(self.ref.model)
        return {"message": _clean(message), "usage": {"prompt_tokens": prompt,
                                                      "completion_tokens": completion},
                "cost_usd": price.cost(prompt, completion) if price else 0.0,
                "priced": price is not None, "model": self.spec}

    async def _stream(self, options: dict[str, Any],
                      on_tokens: Callable[[str], Awaitable[None]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Accumulate a streamed reply; hand tokens to `on_tokens` in coalesced pieces
        (every 100 ms or 200 characters) rather than one event per token."""
        stream = await self.client.chat.completions.create(
            **options, stream=True, stream_options={"include_usage": True})
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, Any] = {}
        pending, flushed_at = "", time.monotonic()
        async for chunk in stream:
            if chunk.usage:
                usage = chunk.usage.model_dump()
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                    pending += delta.content
                for call in delta.tool_calls or ():
                    slot = calls.setdefault(call.index, {"id": None, "type": "function",
                                                         "function": {"name": "", "arguments": ""}})
                    slot["id"] = call.id or slot["id"]
                    if call.function and call.function.name:
                        slot["function"]["name"] += call.function.name
                    if call.function and call.function.arguments:
                        slot["function"]["arguments"] += call.function.arguments
            if pending and (len(pending) >= 200 or time.monotonic() - flushed_at >= 0.1):
                await on_tokens(pending)
                pending, flushed_at = "", time.monotonic()
        if pending:
            await on_tokens(pending)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return message, usage


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    """Only what a provider accepts back in the history."""
    out: dict[str, Any] = {"role": "assistant"}
    if message.get("content") is not None or not message.get("tool_calls"):
        out["content"] = message.get("content")  # a null content is left out beside tool calls
    if message.get("tool_calls"):
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["function"]["name"],
                                           "arguments": c["function"].get("arguments") or "{}"}}
                             for c in message["tool_calls"]]
    return out


def _retry_after_s(exc: Exception) -> float | None:
    """Seconds the provider asked us to wait (Retry-After: seconds or an HTTP date)."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if headers.get("retry-after-ms"):
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        import email.utils  # an HTTP date is rare here: not loaded at every start

        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else None


def _describe(exc: Exception) -> str:
    """`HTTP 400: <the provider's own message>`, or the error's type and text."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        body = body.get("error", body)
    text = body.get("message") if isinstance(body, dict) else None
    text = text or str(getattr(exc, "message", None) or exc)
    return f"HTTP {status}: {text}" if status else f"{type(exc).__name__}: {text}"
