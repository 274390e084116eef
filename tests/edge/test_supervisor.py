"""Several edge workers behind one port (ANDROID_EDGE_WORKERS): the restart policy on its
own, and real `python -m edge` supervisors on a real redis-server."""

from __future__ import annotations

import asyncio
import http.client
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from canonical.bus import open_bus
from canonical.client import DeviceClient
from edge.supervisor import (
    EXIT_BAD_SETTINGS,
    METRICS_DIR_ENV,
    METRICS_DIR_PREFIX,
    WORKER_INDEX_ENV,
    RestartBackoff,
    gives_up,
    remove_stale_metrics_dirs,
    stale_metrics_dirs,
    worker_edge_id,
)
from edge.worker_metrics import SNAPSHOT_S
from tests.harness import EdgeProcess, ManagedProcess, RedisServer, free_port, scrubbed_environ
from tests.harness.certs import self_signed

TENANT = "supervised"
TOKEN = "supervisor-test-token-0123456789"


# -- the restart policy


def test_a_worker_dying_young_again_and_again_waits_longer_each_time_up_to_the_cap() -> None:
    backoff = RestartBackoff(first_s=0.5, max_s=4.0, healthy_after_s=30.0)
    assert [backoff.next_delay(lived_s=1.0) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_worker_that_lived_long_is_restarted_after_the_first_delay_again() -> None:
    backoff = RestartBackoff(first_s=0.5, max_s=4.0, healthy_after_s=30.0)
    for _ in range(5):
        backoff.next_delay(lived_s=1.0)
    assert backoff.next_delay(lived_s=31.0) == 0.5


@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), min_size=1, max_size=40))
def test_restart_delays_stay_between_the_first_delay_and_the_cap(lives: list[float]) -> None:
    backoff = RestartBackoff(first_s=0.5, max_s=30.0, healthy_after_s=30.0)
    for lived in lives:
        assert 0.5 <= backoff.next_delay(lived) <= 30.0


def test_the_supervisor_gives_up_only_on_a_worker_that_refuses_its_settings_at_start() -> None:
    assert gives_up(EXIT_BAD_SETTINGS, lived_s=1.0, started_ok_before=False)
    assert not gives_up(EXIT_BAD_SETTINGS, lived_s=60.0, started_ok_before=False)
    assert not gives_up(EXIT_BAD_SETTINGS, lived_s=1.0, started_ok_before=True)
    assert not gives_up(1, lived_s=1.0, started_ok_before=False)
    assert not gives_up(-9, lived_s=1.0, started_ok_before=False)


def test_each_worker_gets_its_own_edge_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKER_INDEX_ENV, raising=False)
    assert worker_edge_id("edge-a") == "edge-a"
    monkeypatch.setenv(WORKER_INDEX_ENV, "1")
    assert worker_edge_id("edge-a") == "edge-a-1"
    assert worker_edge_id(None) is None  # a random id per process is unique already


# -- metrics directories left behind


def test_a_metrics_directory_is_stale_once_the_supervisor_named_in_it_is_gone() -> None:
    names = [
        f"{METRICS_DIR_PREFIX}100-abc",  # its supervisor is gone
        f"{METRICS_DIR_PREFIX}200-def",  # still running
        f"{METRICS_DIR_PREFIX}abc",  # an older name without a pid: not ours to judge
        f"{METRICS_DIR_PREFIX}300-",  # no mkdtemp suffix: not one we made
        "hdg-other-100-abc",
        "100-abc",
    ]
    assert stale_metrics_dirs(names, alive=lambda pid: pid == 200) == [
        f"{METRICS_DIR_PREFIX}100-abc"
    ]


@given(st.lists(st.text(max_size=30), max_size=20))
def test_no_name_is_stale_while_every_supervisor_lives(names: list[str]) -> None:
    assert stale_metrics_dirs(names, alive=lambda pid: True) == []


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=10)
    return process.pid


def test_only_this_users_directories_of_dead_supervisors_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / f"{METRICS_DIR_PREFIX}{_dead_pid()}-x1"
    live = tmp_path / f"{METRICS_DIR_PREFIX}{os.getpid()}-x2"
    (dead / "inner").mkdir(parents=True)
    (dead / "inner" / "worker-0.prom").write_text("snapshot")
    live.mkdir()
    link = tmp_path / f"{METRICS_DIR_PREFIX}{_dead_pid()}-x3"
    link.symlink_to(live)  # not a directory of ours: never followed, never removed
    assert remove_stale_metrics_dirs(str(tmp_path)) == [str(dead)]
    assert not dead.exists()
    assert live.is_dir() and link.is_symlink()


# -- real supervisors


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
            out += [int(child) for child in f.read().split()]
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {key.decode(): value.decode() for key, value in pairs}


def _wait(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _listening_workers(edge: EdgeProcess) -> int:
    return len(re.findall(r"edge \S+ listening on", edge.log_text()))


def _register_tenant(redis_server: RedisServer) -> None:
    async def register() -> None:
        bus = open_bus(redis_server.url)
        try:
            await bus.register_tenant(TENANT, TOKEN, ttl_s=600)
        finally:
            await bus.close()

    asyncio.run(register())


@pytest.fixture
def supervised(
    redis_server: RedisServer, edge_factory: Callable[..., EdgeProcess]
) -> Iterator[EdgeProcess]:
    _register_tenant(redis_server)
    edge = edge_factory(
        env={
            "ANDROID_BUS_URL": redis_server.url,
            "ANDROID_WS_HOST": "127.0.0.1",
            "ANDROID_EDGE_WORKERS": "2",
        },
        port_env="ANDROID_WS_PORT",
    )
    _wait(lambda: _listening_workers(edge) == 2 and len(_children(edge.pid)) == 2)
    yield edge


async def _ready(edge: EdgeProcess) -> DeviceClient:
    client = await DeviceClient(edge.ws_url + "/ws").connect()
    ready = await client.hello_pheby(TOKEN)
    assert ready["type"] == "ready"
    return client


def test_both_workers_answer_devices_on_the_one_port(supervised: EdgeProcess) -> None:
    workers = _children(supervised.pid)
    assert len(workers) == 2

    async def each_worker_alone() -> None:
        # A stopped worker accepts nothing: the device can only be served by the other.
        for paused in workers:
            os.kill(paused, signal.SIGSTOP)
            try:
                client = await _ready(supervised)
                await client.close()
            finally:
                os.kill(paused, signal.SIGCONT)

    asyncio.run(each_worker_alone())


def _scrape(edge: EdgeProcess) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def _pheby_connections(text: str) -> dict[str, float]:
    """hdg_edge_connections{dialect="pheby"} of each worker in one scrape."""
    found = re.findall(
        r'^hdg_edge_connections\{worker="(\d+)",dialect="pheby"\} (\S+)$', text, re.M
    )
    return {worker: float(value) for worker, value in found}


def test_any_worker_answers_a_scrape_with_every_workers_devices(
    supervised: EdgeProcess,
) -> None:
    async def scrape() -> dict[str, float]:
        return _pheby_connections(await asyncio.to_thread(_scrape, supervised))

    async def scenario() -> None:
        clients = [await _ready(supervised) for _ in range(12)]
        try:
            deadline = time.monotonic() + 20
            while sum((await scrape()).values()) != 12:
                assert time.monotonic() < deadline, "the scrapes never added up"
                await asyncio.sleep(0.1)
            # Now both workers' newest snapshots were written after the last device came.
            await asyncio.sleep(SNAPSHOT_S + 1)
            for _ in range(6):  # whichever worker accepts each scrape
                by_worker = await scrape()
                assert set(by_worker) == {"0", "1"} and sum(by_worker.values()) == 12
        finally:
            for client in clients:
                await client.close()

    asyncio.run(scenario())


def test_a_worker_that_dies_is_replaced_and_the_port_keeps_serving(
    supervised: EdgeProcess,
) -> None:
    first, second = _children(supervised.pid)
    os.kill(first, signal.SIGKILL)

    async def meanwhile() -> None:
        client = await _ready(supervised)
        await client.close()

    asyncio.run(meanwhile())
    _wait(lambda: len(_children(supervised.pid)) == 2 and first not in _children(supervised.pid))
    assert second in _children(supervised.pid)
    assert "exited with -9; restarting" in supervised.log_text()
    _wait(lambda: _listening_workers(supervised) == 3)


def _stops_gracefully(edge: EdgeProcess, signum: int) -> None:
    """``signum`` with a device online: the device hears 1001 and the edge exits 0."""

    async def signal_with_a_device_online() -> int | None:
        client = await _ready(edge)
        edge.process.send_signal(signum)
        return await client.wait_closed(timeout=15)

    assert asyncio.run(signal_with_a_device_online()) == 1001
    _wait(lambda: not edge.running)
    assert edge.process.returncode == 0


def test_stopping_the_supervisor_says_going_away_to_devices_and_stops_every_worker(
    supervised: EdgeProcess,
) -> None:
    workers = _children(supervised.pid)
    metrics_dir = Path(_environ(workers[0])[METRICS_DIR_ENV])
    assert metrics_dir.is_dir()
    _stops_gracefully(supervised, signal.SIGTERM)
    assert not any(_alive(pid) for pid in workers)
    assert not metrics_dir.exists()  # the workers' metrics snapshots go with them


def test_a_hang_up_stops_the_supervisor_and_its_workers_as_sigterm_does(
    supervised: EdgeProcess,
) -> None:
    workers = _children(supervised.pid)
    _stops_gracefully(supervised, signal.SIGHUP)
    assert not any(_alive(pid) for pid in workers)


def test_a_hang_up_stops_a_lone_edge_with_going_away_to_its_devices(
    redis_server: RedisServer, edge_factory: Callable[..., EdgeProcess]
) -> None:
    _register_tenant(redis_server)
    edge = edge_factory(
        env={"ANDROID_BUS_URL": redis_server.url, "ANDROID_WS_HOST": "127.0.0.1"},
        port_env="ANDROID_WS_PORT",
    )
    _wait(lambda: _listening_workers(edge) == 1)
    _stops_gracefully(edge, signal.SIGHUP)


def test_workers_stop_by_themselves_when_the_supervisor_is_killed(
    supervised: EdgeProcess,
) -> None:
    workers = _children(supervised.pid)
    supervised.process.send_signal(signal.SIGKILL)  # the supervisor alone, not its group
    assert supervised.process.wait(timeout=10) == -signal.SIGKILL
    _wait(lambda: not any(_alive(pid) for pid in workers))


def test_the_metrics_directory_of_a_killed_supervisor_is_removed_by_the_next_one(
    redis_server: RedisServer, edge_factory: Callable[..., EdgeProcess], tmp_path: Path
) -> None:
    env = {
        "ANDROID_BUS_URL": redis_server.url,
        "ANDROID_WS_HOST": "127.0.0.1",
        "ANDROID_EDGE_WORKERS": "2",
        "TMPDIR": str(tmp_path),
    }
    first = edge_factory(env=env, port_env="ANDROID_WS_PORT")
    _wait(lambda: len(_children(first.pid)) == 2)
    workers = _children(first.pid)
    left = Path(_environ(workers[0])[METRICS_DIR_ENV])
    assert left.parent == tmp_path
    first.process.send_signal(signal.SIGKILL)  # no chance to clean up
    first.process.wait(timeout=10)
    _wait(lambda: not any(_alive(pid) for pid in workers))
    assert left.is_dir()
    second = edge_factory(env=env, port_env="ANDROID_WS_PORT")
    _wait(lambda: _listening_workers(second) == 2 and len(_children(second.pid)) == 2)
    assert not left.exists()
    ours = Path(_environ(_children(second.pid)[0])[METRICS_DIR_ENV])
    assert ours.is_dir() and ours.name.startswith(f"{METRICS_DIR_PREFIX}{second.pid}-")


def test_a_worker_whose_supervisor_died_while_it_was_starting_stops_by_itself(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # The worker is held before `python -m edge` runs until the test opens the gate, so
    # the supervisor is surely gone before the worker starts watching it.
    gate = tmp_path / "gate"
    held = f"while [ ! -e {gate} ]; do sleep 0.05; done; exec {sys.executable} -m edge"
    script = textwrap.dedent(
        f"""
        import sys
        from edge.supervisor import Supervisor, listen_sockets
        socks = listen_sockets("127.0.0.1", int(sys.argv[1]))
        sys.exit(Supervisor(socks, 1, argv=["sh", "-c", {held!r}]).run())
        """
    )
    port = free_port()
    env = {"ANDROID_BUS_URL": redis_server.url, "ANDROID_WS_HOST": "127.0.0.1"}
    env["ANDROID_WS_PORT"] = str(port)
    supervisor = ManagedProcess(
        "supervisor",
        [sys.executable, "-c", script, str(port)],
        log_path=tmp_path / "supervisor.log",
        env=scrubbed_environ(env),
    ).start()
    try:
        _wait(lambda: len(_children(supervisor.pid)) == 1)
        (worker,) = _children(supervisor.pid)
        os.kill(supervisor.pid, signal.SIGKILL)  # the supervisor alone, not its group
        _wait(lambda: not supervisor.running)
        gate.touch()
        _wait(lambda: not _alive(worker))
    finally:
        supervisor.stop()


def _tls_supervisor(redis: RedisServer, tmp_path: Path, cert: Path, key: Path) -> EdgeProcess:
    """Two workers serving wss:// with this certificate and key, started (not waited for)."""
    edge = EdgeProcess(
        env={
            "ANDROID_BUS_URL": redis.url,
            "ANDROID_WS_HOST": "127.0.0.1",
            "ANDROID_EDGE_WORKERS": "2",
            "ANDROID_WS_CERT": str(cert),
            "ANDROID_WS_KEY": str(key),
        },
        port_env="ANDROID_WS_PORT",
        workdir=tmp_path / "edge",
    )
    edge.process.start()
    return edge


@pytest.mark.parametrize("broken", ["missing certificate", "key not PEM"])
def test_a_certificate_the_workers_cannot_load_stops_the_supervisor_with_one_line(
    redis_server: RedisServer, tmp_path: Path, broken: str
) -> None:
    cert, key = self_signed(tmp_path)
    if broken == "missing certificate":
        cert = tmp_path / "missing.crt"
    else:
        key.write_text("not a key\n")
    edge = _tls_supervisor(redis_server, tmp_path, cert, key)
    try:
        _wait(lambda: not edge.running)
        assert edge.process.wait(0) == EXIT_BAD_SETTINGS
        assert "edge: bad setting ANDROID_WS_CERT/ANDROID_WS_KEY" in edge.log_text()
        assert "Traceback" not in edge.log_text()
    finally:
        edge.stop()


def test_supervised_workers_serve_wss_with_the_configured_certificate(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    edge = _tls_supervisor(redis_server, tmp_path, cert, key)
    trust = ssl.create_default_context(cafile=str(cert))

    async def over_tls() -> None:
        bus = open_bus(redis_server.url)
        try:
            await bus.register_tenant(TENANT, TOKEN, ttl_s=600)
        finally:
            await bus.close()
        client = await DeviceClient(f"wss://localhost:{edge.port}/ws", ssl=trust).connect()
        try:
            assert (await client.hello_pheby(TOKEN))["type"] == "ready"
        finally:
            await client.close()

    try:
        _wait(lambda: _listening_workers(edge) == 2)
        asyncio.run(over_tls())
    finally:
        edge.stop()


def _healthz(host: str, port: int) -> bool:
    connection = http.client.HTTPConnection(host, port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_edge_on_the_ipv6_any_address_listens_on_ipv6_alone_with_or_without_workers(
    redis_server: RedisServer, tmp_path: Path, workers: str
) -> None:
    port = free_port()
    edge = EdgeProcess(
        env={
            "ANDROID_BUS_URL": redis_server.url,
            "ANDROID_WS_HOST": "::",
            "ANDROID_WS_PORT": str(port),
            "ANDROID_EDGE_WORKERS": workers,
        },
        port=port,
        workdir=tmp_path / "edge",
    )
    edge.process.start()
    try:
        _wait(lambda: _healthz("::1", port))
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        edge.stop()


def test_a_bus_url_the_workers_cannot_open_stops_the_supervisor_with_one_line(
    tmp_path: Path,
) -> None:
    edge = EdgeProcess(
        env={
            "ANDROID_BUS_URL": "redis://127.0.0.1:no-port/0",  # the scheme is right
            "ANDROID_WS_HOST": "127.0.0.1",
            "ANDROID_EDGE_WORKERS": "2",
        },
        port_env="ANDROID_WS_PORT",
        workdir=tmp_path / "edge",
    )
    edge.process.start()
    try:
        _wait(lambda: not edge.running)
        assert edge.process.wait(0) == EXIT_BAD_SETTINGS
        assert "edge: bad setting ANDROID_BUS_URL" in edge.log_text()
        assert "refused to start (exit 2): stopping" in edge.log_text()
        assert "Traceback" not in edge.log_text()
    finally:
        edge.stop()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_stops_the_edge_cleanly_with_or_without_workers(
    redis_server: RedisServer, edge_factory: Callable[..., EdgeProcess], workers: str
) -> None:
    edge = edge_factory(
        env={
            "ANDROID_BUS_URL": redis_server.url,
            "ANDROID_WS_HOST": "127.0.0.1",
            "ANDROID_EDGE_WORKERS": workers,
        },
        port_env="ANDROID_WS_PORT",
    )
    _wait(lambda: _listening_workers(edge) == int(workers))
    os.killpg(edge.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    _wait(lambda: not edge.running)
    assert edge.process.wait(0) == 0
    assert "Traceback" not in edge.log_text()


def test_a_worker_that_cannot_be_spawned_again_is_retried_while_the_others_serve(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # The workers' program, which a deploy may replace while the supervisor runs.
    program = tmp_path / "edge-worker"
    program.write_text(f"#!/bin/sh\nexec {sys.executable} -m edge\n")
    program.chmod(0o755)
    away = tmp_path / "edge-worker.away"
    script = textwrap.dedent(
        f"""
        import sys
        from edge.supervisor import Supervisor, listen_sockets
        socks = listen_sockets("127.0.0.1", int(sys.argv[1]))
        sys.exit(Supervisor(socks, 2, argv=[{str(program)!r}]).run())
        """
    )
    port = free_port()
    env = {"ANDROID_BUS_URL": redis_server.url, "ANDROID_WS_HOST": "127.0.0.1"}
    env["ANDROID_WS_PORT"] = str(port)
    supervisor = ManagedProcess(
        "supervisor",
        [sys.executable, "-c", script, str(port)],
        log_path=tmp_path / "supervisor.log",
        env=scrubbed_environ(env),
    ).start()

    def logged(text: str) -> Callable[[], bool]:
        return lambda: text in supervisor.log_text() or not supervisor.running

    try:
        # Both serving, not just spawned: a shell that has not yet opened the script when
        # it is moved away exits 2, which the supervisor rightly takes for bad settings.
        _wait(lambda: supervisor.log_text().count(" listening on ") >= 2)
        first, second = _children(supervisor.pid)
        program.rename(away)
        os.kill(first, signal.SIGKILL)
        _wait(logged("edge worker 0 could not be started"))
        assert supervisor.running
        assert _alive(second)
        away.rename(program)
        _wait(lambda: len(_children(supervisor.pid)) == 2 or not supervisor.running)
        assert supervisor.running
        assert second in _children(supervisor.pid)
    finally:
        supervisor.stop()
