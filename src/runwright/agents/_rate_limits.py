"""Rate limits per model: a provider's quota, shared by every worker through the store.

`app.rate_limit("openai:gpt-4o-mini", requests_per_min=500, tokens_per_min=200_000)`
declares it (the deployment's setting, like its secrets: a job's arguments cannot set or
lift it). Every call of that model, by an agent or the `llm` job, first reserves one
request and its estimated tokens in two token buckets (`store.bucket_take`), so a
pipeline fanning out a thousand steps keeps to the quota instead of retrying into 429s.

A reservation may leave a bucket in debt: the answer is when the reserver's turn comes.
A turn within `INLINE_WAIT_S` is waited in the slot; a later one gives the reservation
back and parks the run (no slot held) until about then, with a little jitter so that
parked runs do not all wake at once. Once a call is made, its real token use replaces
the estimate (the difference is taken, or given back).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from ..core._clock import Clock
from ..core._resilience import through_blinks
from ..engine._parking import Park
from ..errors import ConfigError
from ..runs import WaitReason
from ..store._interface import Store
from ..store._params import BucketTakeParams

__all__ = ["INLINE_WAIT_S", "RateLimit", "estimate_tokens", "settle_tokens", "take_quota", "within_quota"]

INLINE_WAIT_S = 1.0  # a shorter wait costs less in the slot than a park and a replay
PARK_JITTER = 0.2  # parked up to this fraction longer than the turn, at random


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A model's quota. `burst_s`: how many seconds' worth of the quota may go at once.
    Defaults to 60 (a whole minute's, as a provider's per-minute window allows)."""

    requests_per_min: float | None = None
    tokens_per_min: float | None = None
    burst_s: float = 60.0

    def __post_init__(self) -> None:
        given = [v for v in (self.requests_per_min, self.tokens_per_min) if v is not None]
        if not given or any(not v > 0 for v in given) or not self.burst_s > 0:
            raise ConfigError("a rate limit needs requests_per_min and/or tokens_per_min > 0, "
                              "and burst_s > 0")

    def takes(self, model: str, tokens: int) -> list[BucketTakeParams]:
        """The reservations one call makes: a request, and its tokens."""
        out = []
        for unit, per_min, amount in (("requests", self.requests_per_min, 1),
                                      ("tokens", self.tokens_per_min, tokens)):
            if per_min is not None:
                out.append(BucketTakeParams(f"model:{model}:{unit}", per_min / 60 * self.burst_s,
                                            per_min / 60, float(amount), force=True))
        return out


def estimate_tokens(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()) -> int:
    """A prompt's tokens, roughly (4 characters a token), before the provider counts them."""
    return len(json.dumps([messages, tools])) // 4 + 1


async def take_quota(store: Store, clock: Clock, model: str, limit: RateLimit, tokens: int) -> None:
    """Reserve a call of `model`: return when its turn has come, or raise Park (the
    reservation given back) when that is more than INLINE_WAIT_S away."""
    held: list[BucketTakeParams] = []
    turn_s = 0.0
    for take in limit.takes(model, tokens):
        turn_s = max(turn_s, await through_blinks(store.bucket_take, take))
        held.append(take)
        if turn_s > INLINE_WAIT_S:
            for given in held:
                await through_blinks(store.bucket_take, _giving_back(given))
            raise Park(clock() + turn_s * (1 + random.uniform(0, PARK_JITTER)), f"rate limit of {model}",
                       WaitReason.RATE_LIMIT)
    if turn_s > 0:
        await asyncio.sleep(turn_s)


async def settle_tokens(store: Store, model: str, limit: RateLimit, estimated: int, used: int) -> None:
    """A call was made: its real token use replaces what was reserved for it."""
    for take in limit.takes(model, used - estimated):
        if take.name.endswith(":tokens") and take.amount:
            await through_blinks(store.bucket_take, take)


def _giving_back(take: BucketTakeParams) -> BucketTakeParams:
    return BucketTakeParams(take.name, take.capacity, take.refill_per_s, -take.amount, force=True)


async def within_quota(store: Store, clock: Clock, model: str, limit: RateLimit | None,
                       messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
                       call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """`call()` (one model call, whose reply has `usage`) once `model`'s quota allows."""
    if limit is None:
        return await call()
    tokens = estimate_tokens(messages, tools)
    await take_quota(store, clock, model, limit, tokens)
    reply = await call()
    usage = reply.get("usage") or {}
    used = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    await settle_tokens(store, model, limit, tokens, used)
    return reply
