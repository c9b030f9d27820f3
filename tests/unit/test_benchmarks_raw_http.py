"""The benchmarks' raw HTTP/1.1 client (benchmarks/_raw_http.py) against a small asyncio server on loopback:
keep-alive requests, chunked and sized bodies, and a server that closes between requests."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _raw_http import Connection, RawHttpError


async def serve(answers: list[bytes], seen: list[bytes]) -> tuple[asyncio.Server, str]:
    """A server that records each request's head and body and sends the next canned answer."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            sized = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
            length = int(sized[0].split(b":")[1]) if sized else 0
            seen.append(head + await reader.readexactly(length))
            answer = answers.pop(0)
            writer.write(answer)
            await writer.drain()
            if b"Connection: close" in answer:
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


def test_requests_share_one_connection_and_read_sized_and_chunked_bodies() -> None:
    async def scenario() -> list[tuple[int, bytes]]:
        seen: list[bytes] = []
        answers = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        ]
        server, base = await serve(answers, seen)
        connection = Connection(base, {"Authorization": "Bearer t"})
        got = [await connection.request("GET", "/a"), await connection.request("POST", "/b", b'{"x":1}')]
        await connection.close()
        server.close()
        assert seen[0].startswith(b"GET /a HTTP/1.1\r\n") and b"Authorization: Bearer t" in seen[0]
        assert seen[1].startswith(b"POST /b HTTP/1.1\r\n") and seen[1].endswith(b'\r\n\r\n{"x":1}')
        assert b"Content-Type: application/json" in seen[1]
        return got

    assert asyncio.run(scenario()) == [(200, b"hello"), (201, b"abcde")]


def test_a_server_that_closed_after_an_answer_is_dialled_again() -> None:
    async def scenario() -> list[tuple[int, bytes]]:
        seen: list[bytes] = []
        answers = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        ]
        server, base = await serve(answers, seen)
        connection = Connection(base, {})
        got = [await connection.request("GET", "/1"), await connection.request("GET", "/2")]
        await connection.close()
        server.close()
        return got

    assert asyncio.run(scenario()) == [(200, b"ok"), (404, b"")]


def test_a_garbled_answer_is_an_error_and_only_plain_http_is_taken() -> None:
    async def scenario() -> None:
        server, base = await serve([b"SSH-2.0-nope\r\n\r\n", b"SSH-2.0-nope\r\n\r\n"], [])
        with pytest.raises(RawHttpError, match="not an HTTP status line"):
            await Connection(base, {}).request("GET", "/")
        server.close()

    asyncio.run(scenario())
    with pytest.raises(ValueError, match="only plain http"):
        Connection("https://127.0.0.1:1", {})
