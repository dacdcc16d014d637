"""What goes over the wire to Postgres, for tests and benches that look at it: the statements psycopg
sends (`sent_statements`), and a TCP proxy to the embedded server's unix socket that can delay every
packet as a network would and drop its connections as a pooler would (`SocketProxy`)."""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg


@contextmanager
def sent_statements() -> Iterator[list[str]]:
    """The text of every statement psycopg sends while inside (a connection's execute is its
    cursor's; a transaction's BEGIN and COMMIT are not statements of a cursor)."""
    sent: list[str] = []
    real = psycopg.Cursor.execute

    def execute(cursor, query, *args, **kwargs):
        sent.append(query if isinstance(query, str) else query.as_string(cursor.connection))
        return real(cursor, query, *args, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]


def unix_socket_of(uri: str) -> str:
    """The socket file of the server a unix-socket ``uri`` names (the embedded server's)."""
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(uri)
    return str(Path(str(info["host"])) / f".s.PGSQL.{info.get('port', 5432)}")


class SocketProxy:
    """A TCP listener on 127.0.0.1 forwarding each connection to a unix socket, every chunk in either
    direction delivered ``one_way`` seconds after it was read, in order. When either side ends, both
    sockets are shut down (before they are closed: a close alone leaves a socket open while the other
    direction's thread is blocked in its recv, and the far end never sees it end); `drop` ends every
    connection it holds (a pooler, a NAT or a load balancer ending idle clients)."""

    def __init__(self, unix_path: str, one_way: float = 0.0):
        self.unix_path, self.one_way = unix_path, one_way
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self.unix_path)
            self.pairs.append((client, server))
            for source, target in ((client, server), (server, client)):
                self._pipe(source, target)

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        due: list[tuple[float, int, bytes]] = []
        ready = threading.Condition()
        order = itertools.count()

        def read() -> None:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                with ready:
                    heapq.heappush(due, (time.perf_counter() + self.one_way, next(order), data))
                    ready.notify()
                if not data:
                    return

        def write() -> None:
            while True:
                with ready:
                    while not due or due[0][0] > time.perf_counter():
                        ready.wait(None if not due else max(0.0, due[0][0] - time.perf_counter()))
                    _, _, data = heapq.heappop(due)
                if not data:
                    break
                try:
                    target.sendall(data)
                except OSError:
                    break
            _end(source, target)

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def uri(self, uri: str, **settings: str) -> str:
        """``uri`` (the embedded server's) through this proxy, with any other ``settings``."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(uri, host="127.0.0.1", port=str(self.port), **settings)

    def drop(self) -> None:
        for pair in self.pairs:
            _end(*pair)
        self.pairs.clear()

    def close(self) -> None:
        self.drop()
        self.listener.close()


def _end(*sockets: socket.socket) -> None:
    for sock in sockets:
        for end in (lambda: sock.shutdown(socket.SHUT_RDWR), sock.close):
            try:
                end()
            except OSError:
                pass
