"""A TCP forwarder on loopback that a test can close and open again: a store made
unreachable for real (connections reset, the port refusing), then back on the same port;
and one that holds what the client sends for `outbound_delay_s` (a request slowed on its
way out, as a loaded machine slows it)."""

from __future__ import annotations

import asyncio

from .ports import free_port

__all__ = ["TcpProxy"]


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()  # kept across close and open (see tests/ports.py)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.outbound_delay_s = 0.0  # read at each chunk: a test changes it on a live connection

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def close(self) -> None:
        """Stop listening and reset every forwarded connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server = self._server
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        if self._server is not server:
            # Accepted before a close() that came while its upstream was being opened:
            # close() could not reset it then, and it must not outlive the close.
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer, outbound=True), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    outbound: bool = False) -> None:
        try:
            while data := await reader.read(65536):
                if outbound and self.outbound_delay_s:
                    await asyncio.sleep(self.outbound_delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
