"""Service processes for tests: a private Redis, the scripted model, edge processes."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.harness.proc import (
    LOOPBACK,
    PYTHON,
    REPO_ROOT,
    ManagedProcess,
    ProcessFailed,
    free_port,
    http_get,
    http_ok,
    make_workdir,
    port_is_open,
    scrubbed_environ,
)

# --------------------------------------------------------------------------- Redis


class RedisServer:
    """A private ``redis-server`` on a loopback port, no persistence, its own temp dir."""

    def __init__(
        self,
        port: int | None = None,
        *,
        workdir: Path | None = None,
        redis_bin: str | None = None,
        host: str = LOOPBACK,
        extra_args: Sequence[str] = (),
    ) -> None:
        binary = redis_bin or shutil.which("redis-server")
        if not binary:
            raise FileNotFoundError("redis-server not found on PATH")
        self.host = host
        self.port = port or free_port(host)
        self._own_workdir = workdir is None
        self.workdir = make_workdir("hdg-redis-", workdir)
        argv = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            "--daemonize",
            "no",
            "--loglevel",
            "notice",
            *extra_args,
        ]
        self.process = ManagedProcess(
            f"redis:{self.port}", argv, log_path=self.workdir / "redis.log", env=dict(os.environ)
        )

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def url_for_db(self, db: int) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running

    def ping(self, timeout: float = 0.5) -> bool:
        """True if the server answers ``PING`` with ``+PONG`` (raw RESP, no client library)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.process.start()
        self.process.wait_until(self.ping, timeout, interval=0.02, what="answering PING")
        return self

    def kill9(self) -> int:
        return self.process.kill9()

    @contextlib.contextmanager
    def frozen(self) -> Iterator[RedisServer]:
        """A silent partition: the server is stopped (SIGSTOP), so its connections stay
        up and nothing answers; it is continued (SIGCONT) on leaving, whatever happened."""
        os.kill(self.pid, signal.SIGSTOP)
        try:
            yield self
        finally:
            os.kill(self.pid, signal.SIGCONT)

    def restart(self, timeout: float = 10.0) -> RedisServer:
        """Start again on the same port (after :meth:`kill9` or :meth:`stop`)."""
        if self.process.running:
            self.process.stop()
        deadline = time.monotonic() + timeout
        while port_is_open(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.start(timeout=max(1.0, deadline - time.monotonic()))

    def stop(self, timeout: float = 5.0) -> int | None:
        return self.process.stop(timeout=timeout, first_signal=signal.SIGTERM)

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class RedisSentinel:
    """A private ``redis-sentinel`` on a loopback port monitoring one primary as
    ``service``; its config file (which Sentinel rewrites) lives in its own temp dir."""

    def __init__(
        self,
        primary: tuple[str, int],
        *,
        service: str = "hdg",
        quorum: int = 2,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        workdir: Path | None = None,
        host: str = LOOPBACK,
    ) -> None:
        binary = shutil.which("redis-sentinel")
        if not binary:
            raise FileNotFoundError("redis-sentinel not found on PATH")
        self.host = host
        self.port = free_port(host)
        self.service = service
        self._own_workdir = workdir is None
        self.workdir = make_workdir("hdg-sentinel-", workdir)
        config = self.workdir / "sentinel.conf"
        config.write_text(
            f"port {self.port}\n"
            f"bind {host}\n"
            f"dir {self.workdir}\n"
            "daemonize no\n"
            f"sentinel monitor {service} {primary[0]} {primary[1]} {quorum}\n"
            f"sentinel down-after-milliseconds {service} {down_after_ms}\n"
            f"sentinel failover-timeout {service} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {service} 1\n"
        )
        self.process = ManagedProcess(
            f"sentinel:{self.port}",
            [binary, str(config)],
            log_path=self.workdir / "sentinel.log",
            env=dict(os.environ),
        )

    def _ask(self, command: bytes, timeout: float = 0.5) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            sock.sendall(command)
            return sock.recv(4096)

    def ping(self) -> bool:
        try:
            return self._ask(b"PING\r\n").startswith(b"+PONG")
        except OSError:
            return False

    def primary(self) -> tuple[str, int] | None:
        """The primary this sentinel names now (raw RESP, no client library)."""
        try:
            reply = self._ask(f"SENTINEL get-master-addr-by-name {self.service}\r\n".encode())
        except OSError:
            return None
        parts = reply.split(b"\r\n")
        if not reply.startswith(b"*2") or len(parts) < 5:
            return None
        return parts[2].decode(), int(parts[4])

    def start(self, timeout: float = 10.0) -> RedisSentinel:
        self.process.start()
        self.process.wait_until(self.ping, timeout, interval=0.02, what="answering PING")
        return self

    def stop(self, timeout: float = 5.0) -> int | None:
        return self.process.stop(timeout=timeout, first_signal=signal.SIGTERM)

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


class SentinelGroup:
    """One primary, its replicas and three sentinels on loopback, with the
    ``redis+sentinel://`` URL that names them. Short failure detection by default."""

    def __init__(
        self,
        workdir: Path,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        service: str = "hdg",
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
    ) -> None:
        self.service = service
        self.primary = RedisServer(workdir=workdir / "redis-0")
        address = (self.primary.host, self.primary.port)
        self.replicas = [
            RedisServer(
                workdir=workdir / f"redis-{i + 1}",
                extra_args=["--replicaof", address[0], str(address[1])],
            )
            for i in range(replicas)
        ]
        self.sentinels = [
            RedisSentinel(
                address,
                service=service,
                quorum=max(1, sentinels // 2 + 1),
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
                workdir=workdir / f"sentinel-{i}",
            )
            for i in range(sentinels)
        ]

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    def url(self, db: int = 0) -> str:
        hosts = ",".join(f"{s.host}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/{db}"

    def current_primary(self) -> tuple[str, int] | None:
        """The address a majority of the sentinels name, if they agree."""
        named = [s.primary() for s in self.sentinels]
        for address in named:
            if address is not None and named.count(address) * 2 > len(named):
                return address
        return None

    def server_at(self, address: tuple[str, int]) -> RedisServer:
        return next(s for s in self.servers if (s.host, s.port) == address)

    def start(self, timeout: float = 20.0) -> SentinelGroup:
        for server in self.servers:
            server.start()
        for sentinel in self.sentinels:
            sentinel.start()
        # Ready once every sentinel has found the replicas and its peers.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._sees_everyone(s) for s in self.sentinels):
                return self
            time.sleep(0.1)
        raise ProcessFailed("the sentinels did not discover the replicas and each other")

    def _sees_everyone(self, sentinel: RedisSentinel) -> bool:
        try:
            reply = sentinel._ask(f"SENTINEL master {self.service}\r\n".encode(), 1.0)
        except OSError:
            return False
        fields = reply.split(b"\r\n")
        values = {fields[i].decode(): fields[i + 2] for i in range(2, len(fields) - 2, 4)}
        return (
            values.get("num-slaves") == str(len(self.replicas)).encode()
            and values.get("num-other-sentinels") == str(len(self.sentinels) - 1).encode()
        )

    def cleanup(self) -> None:
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for server in self.servers:
            server.cleanup()


# --------------------------------------------------------------------------- scripted model


class ScriptedModel:
    """``python -m scripted_model`` as a subprocess on a free loopback port."""

    def __init__(
        self,
        *,
        first_token_delay: float = 0.0,
        chunk_delay: float = 0.02,
        workdir: Path | None = None,
        host: str = LOOPBACK,
        port: int | None = None,
    ) -> None:
        self.host = host
        self.first_token_delay = first_token_delay
        self.chunk_delay = chunk_delay
        self._fixed_port = port
        self.port = port or 0
        self._own_workdir = workdir is None
        self.workdir = make_workdir("hdg-model-", workdir)
        self.process: ManagedProcess | None = None

    def _argv(self) -> list[str]:
        return [
            PYTHON,
            "-m",
            "scripted_model",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--first-token-delay",
            str(self.first_token_delay),
            "--chunk-delay",
            str(self.chunk_delay),
            "--log-file",
            str(self.workdir / "requests.jsonl"),
        ]

    @property
    def url(self) -> str:
        """Server root, e.g. ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return self.url + "/v1"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("scripted model was never started")
        return self.process.pid

    def healthy(self) -> bool:
        return http_ok(self.url + "/_health")

    def start(self, timeout: float = 20.0, attempts: int = 3) -> ScriptedModel:
        last: Exception | None = None
        for _ in range(attempts):
            self.port = self._fixed_port or free_port(self.host)
            self.process = ManagedProcess(
                f"scripted-model:{self.port}",
                self._argv(),
                log_path=self.workdir / "server.log",
                env=scrubbed_environ(),
                cwd=REPO_ROOT,
            )
            self.process.start()
            try:
                self.process.wait_until(self.healthy, timeout, interval=0.05, what="healthy")
                return self
            except ProcessFailed as err:  # e.g. lost a race for the port: try another
                last = err
                self.process.stop()
                if self._fixed_port:
                    break
        raise ProcessFailed(f"scripted model did not start: {last}")

    def log(self) -> list[dict[str, Any]]:
        """The server's request log (``GET /_log``)."""
        status, body = http_get(self.url + "/_log", timeout=5)
        if status != 200:
            raise RuntimeError(f"GET /_log -> {status}")
        data = json.loads(body)
        if not isinstance(data, list):
            raise RuntimeError("GET /_log did not return a list")
        return data

    def chat_log(self) -> list[dict[str, Any]]:
        """Only the chat-completions requests."""
        return [e for e in self.log() if str(e.get("path", "")).endswith("/chat/completions")]

    def clear_log(self) -> None:
        request = urllib.request.Request(self.url + "/_log", method="DELETE")
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()

    def stop(self) -> int | None:
        return self.process.stop(timeout=5) if self.process else None

    def kill9(self) -> int:
        if self.process is None:
            raise RuntimeError("scripted model was never started")
        return self.process.kill9()

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


# --------------------------------------------------------------------------- edge


class EdgeProcess:
    """``python -m edge`` with the given environment, ready when ``GET /healthz`` is 200.

    The harness does not guess the edge's settings names: pass the listening port through
    ``port_env`` (the variable is set to ``port``) and/or ``args`` (``{port}`` is replaced).
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        port: int | None = None,
        port_env: str | None = None,
        host: str = LOOPBACK,
        health_path: str = "/healthz",
        workdir: Path | None = None,
        module: str = "edge",
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.health_path = health_path
        self._own_workdir = workdir is None
        self.workdir = make_workdir("hdg-edge-", workdir)
        extra = dict(env or {})
        if port_env:
            extra[port_env] = str(self.port)
        self.env = scrubbed_environ(extra)
        argv = [PYTHON, "-m", module, *(a.replace("{port}", str(self.port)) for a in args)]
        name = f"edge:{self.port}:{secrets.token_hex(2)}"
        self.process = ManagedProcess(
            name, argv, log_path=self.workdir / "edge.log", env=self.env, cwd=REPO_ROOT
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    @property
    def health_url(self) -> str:
        return self.url + self.health_path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running

    def healthy(self) -> bool:
        return http_ok(self.health_url)

    def start(self, timeout: float = 30.0) -> EdgeProcess:
        self.process.start()
        self.process.wait_until(self.healthy, timeout, interval=0.05, what="healthy")
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.process.stop(timeout=timeout, first_signal=signal.SIGTERM)

    def kill9(self) -> int:
        return self.process.kill9()

    def restart(self, timeout: float = 30.0) -> EdgeProcess:
        if self.process.running:
            self.stop()
        return self.start(timeout)

    def log_text(self) -> str:
        return self.process.log_text()

    def cleanup(self) -> None:
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
