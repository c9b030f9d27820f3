"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for load steps that must measure the server.

An HTTP library's client costs about as much CPU per request as the server it calls (httpx's async client: about
1 ms a request on a 2-core machine), and a benchmark that runs its clients on the server's machine would measure
them. ``Connection`` writes the request line and headers itself and reads the status line, the headers and a
``Content-Length`` (or chunked) body: enough for the answers of `phalanx server`, nothing more. Not for use
outside benchmarks: no redirects, no TLS, no proxies, no pipelining.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class RawHttpError(Exception):
    """The server's answer could not be read (a closed connection, a malformed head)."""


class Connection:
    """One persistent HTTP/1.1 connection to ``base_url``, its requests sent one after another."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"{base_url}: only plain http://HOST:PORT URLs")
        self.host, self.port = parts.hostname, parts.port or 80
        fixed = {"Host": f"{self.host}:{self.port}", **headers}
        self._head = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request and read its whole answer: (status code, body). Reconnects once if the server closed."""
        for attempt in (1, 2):
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            try:
                return await self._exchange(method, path, body)
            except (ConnectionError, asyncio.IncompleteReadError, RawHttpError):
                await self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _exchange(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        assert self._reader is not None and self._writer is not None
        typed = "Content-Type: application/json\r\n" if body else ""
        head = f"{method} {path} HTTP/1.1\r\n{self._head}{typed}Content-Length: {len(body)}\r\n\r\n"
        self._writer.write(head.encode() + body)
        status = await self._reader.readline()
        fields = status.split(None, 2)
        if len(fields) < 2 or not fields[0].startswith(b"HTTP/1."):
            raise RawHttpError(f"not an HTTP status line: {status[:80]!r}")
        code = int(fields[1])
        length: int | None = None
        chunked = closing = False
        while True:
            line = await self._reader.readline()
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise RawHttpError("the connection closed inside the answer's head")
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                closing = b"close" in value.lower()
        if chunked:
            answer = await self._chunks()
        elif length is not None:
            answer = await self._reader.readexactly(length)
        else:
            answer = await self._reader.read()
            closing = True
        if closing:
            await self.close()
        return code, answer

    async def _chunks(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self._reader.readline()  # the empty trailer
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readline()

    async def close(self) -> None:
        if self._writer is not None:
            writer, self._writer, self._reader = self._writer, None, None
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
