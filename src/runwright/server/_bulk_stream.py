"""POST /bulk's progress as it goes. Asked with `Accept: application/x-ndjson`, the answer
is a stream of JSON lines: `{"acted": n, "matched": m}` after each page of runs the action
went through (a page is hundreds of runs: a long action says how far it is), then
`{"report": {...}}`, the same report the JSON answer is. An action that fails part-way ends
the stream with `{"problem": {...}}` instead: its 200 was sent with the first line.

An action whose caller stops reading (a closed page) still finishes, as one answered in
JSON does: runs are not left half acted on because a browser went away."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.responses import StreamingResponse

from ..client._bulk import BulkReport
from ._problems import problem_of

__all__ = ["PROGRESS_MEDIA", "progress_stream", "wants_progress"]

PROGRESS_MEDIA = "application/x-ndjson"
# The actions still running whose callers stopped reading: held, so that none is collected.
_RUNNING: set[asyncio.Task[None]] = set()


def wants_progress(accept: str | None) -> bool:
    return accept is not None and PROGRESS_MEDIA in accept


def progress_stream(act: Callable[[Callable[[int, int], None]], Awaitable[BulkReport]]) -> StreamingResponse:
    """`act(progress)` run now, its progress and report as the lines of a stream."""
    lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def run() -> None:
        try:
            report = await act(lambda acted, matched: lines.put_nowait({"acted": acted, "matched": matched}))
            lines.put_nowait({"report": report.as_json()})
        except Exception as exc:  # noqa: BLE001 - the status is sent: the problem is the last line
            lines.put_nowait({"problem": problem_of(exc)})
        finally:
            lines.put_nowait(None)

    task = asyncio.ensure_future(run())
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)

    async def body() -> AsyncIterator[str]:
        while (line := await lines.get()) is not None:
            yield json.dumps(line) + "\n"

    return StreamingResponse(body(), media_type=PROGRESS_MEDIA)
