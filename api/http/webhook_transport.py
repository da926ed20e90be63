"""An httpx transport whose every request is bounded as a whole: `AttemptTransport(attempt_s)`.

httpx's time-outs bound each connect, read and write, so a receiver that trickles its answer one byte at a time
(each byte within the time-out) holds the caller for as long as it likes. Here the request's start sets a deadline
`attempt_s` ahead (per thread), and every socket operation of that request (connect, TLS handshake, each write of the
body, each read of the answer's head and of any body read in the same thread) waits only for what is left of it;
past the deadline the operation fails as a time-out of its kind (httpx.ConnectTimeout, ReadTimeout, WriteTimeout).
Connections are pooled and reused as httpx's own transport does (httpcore's pool over its blocking sockets).

Must not know: webhooks, payloads, signing, retries, settings or the environment (no proxies: the caller that needs
one builds its own client).
"""
from __future__ import annotations

import contextlib
import ssl
import threading
import time
import typing
from collections.abc import Iterable, Iterator

import httpcore
import httpx

WRITE_CHUNK_BYTES = 16 * 1024       # a large body is written in pieces, each with the time then left
# httpcore's errors as httpx raises them: the first class that matches (the most specific ones first)
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout), (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout), (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException), (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError), (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError), (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError), (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError))


class _Deadline:
    """The current request's deadline on the monotonic clock, one per thread (a pool may serve several threads)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def start(self, seconds: float) -> None:
        self._local.at = time.monotonic() + seconds

    def left(self, timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
        """What an operation may wait: its own time-out, cut to what is left of the request's time; `expired` when
        nothing is."""
        at = getattr(self._local, "at", None)
        if at is None:
            return timeout
        left = at - time.monotonic()
        if left <= 0:
            raise expired("the request's time is up")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    """A connection's socket stream whose every operation waits at most what is left of the request's time."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_CHUNK_BYTES):
            piece = buffer[start:start + WRITE_CHUNK_BYTES]
            self._stream.write(piece, self._deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        wait_s = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, wait_s), self._deadline)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's blocking sockets, each connection's stream bounded by the request's deadline."""

    def __init__(self, deadline: _Deadline) -> None:
        self._sockets = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        wait_s = self._deadline.left(timeout, httpcore.ConnectTimeout)
        stream = self._sockets.connect_tcp(host, port, wait_s, local_address, socket_options)
        return _Stream(stream, self._deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[typing.Any] | None = None) -> httpcore.NetworkStream:
        wait_s = self._deadline.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._sockets.connect_unix_socket(path, wait_s, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


@contextlib.contextmanager
def _as_httpx() -> Iterator[None]:
    """httpcore's errors raised as httpx's (what httpx's own transport does), so callers catch one family."""
    try:
        yield
    except tuple(ours for ours, _ in _ERRORS) as exc:
        kind = next(theirs for ours, theirs in _ERRORS if isinstance(exc, ours))
        raise kind(str(exc)) from exc


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _as_httpx():
                close()


class AttemptTransport(httpx.BaseTransport):
    """httpx transport over a connection pool: each request has `attempt_s` from its start for everything it does
    on the network; `verify` as httpx takes it (True: the system's and certifi's CAs, an SSLContext, False)."""

    def __init__(self, attempt_s: float, verify: ssl.SSLContext | bool = True) -> None:
        if not attempt_s > 0:
            raise ValueError(f"attempt_s must be above 0, not {attempt_s}")
        self.attempt_s = attempt_s
        self._deadline = _Deadline()
        self._pool = httpcore.ConnectionPool(
            ssl_context=verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify=verify),
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0,     # httpx's own defaults
            network_backend=_Backend(self._deadline))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._deadline.start(self.attempt_s)
        url = request.url
        core = httpcore.Request(method=request.method, headers=request.headers.raw, extensions=request.extensions,
                                url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                                                 target=url.raw_path),
                                content=typing.cast(Iterable[bytes], request.stream))
        with _as_httpx():
            response = self._pool.handle_request(core)
        return httpx.Response(status_code=response.status, headers=response.headers, extensions=response.extensions,
                              stream=_Body(typing.cast(Iterable[bytes], response.stream)))

    def close(self) -> None:
        self._pool.close()
