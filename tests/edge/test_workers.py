"""Several edge workers behind one port (ANDROID_EDGE_WORKERS) under uvicorn's process
manager: the pure parts on their own, and real `python -m edge` managers on a real
redis-server."""

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
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidMessage

from canonical.bus import open_bus
from canonical.client import DeviceClient
from edge.metrics import dead_workers
from edge.workers import (
    EXIT_BAD_SETTINGS,
    METRICS_DIR_PREFIX,
    remove_stale_metrics_dirs,
    stale_metrics_dirs,
    worker_edge_id,
)
from tests.harness import EdgeProcess, RedisServer, free_port
from tests.harness.certs import self_signed

TENANT = "supervised"
TOKEN = "supervisor-test-token-0123456789"


def test_each_worker_gets_its_own_edge_id() -> None:
    assert worker_edge_id("edge-a", 4242) == "edge-a-4242"
    assert worker_edge_id("edge-a", 4243) != worker_edge_id("edge-a", 4242)
    assert worker_edge_id(None, 4242) is None  # a random id per process is unique already


# -- live gauges of workers that died


def test_the_live_gauges_of_a_worker_that_is_gone_are_found_by_its_pid() -> None:
    names = [
        "gauge_livesum_100.db",  # gone
        "gauge_livemax_100.db",
        "gauge_livesum_200.db",  # alive
        "counter_100.db",  # a counter: its total stays after the worker
        "gauge_all_100.db",  # not a live mode
        "gauge_livesum_x.db",
        "gauge_livesum_300.db.tmp",
    ]
    assert dead_workers(names, alive=lambda pid: pid == 200) == {100}


@given(st.lists(st.text(max_size=30), max_size=20))
def test_no_worker_is_dead_while_every_pid_lives(names: list[str]) -> None:
    assert dead_workers(names, alive=lambda pid: True) == set()


# -- metrics directories left behind


def test_a_metrics_directory_is_stale_once_the_manager_named_in_it_is_gone() -> None:
    names = [
        f"{METRICS_DIR_PREFIX}100-abc",  # its manager is gone
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
def test_no_name_is_stale_while_every_manager_lives(names: list[str]) -> None:
    assert stale_metrics_dirs(names, alive=lambda pid: True) == []


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=10)
    return process.pid


def test_only_this_users_directories_of_dead_managers_are_removed(tmp_path: Path) -> None:
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


# -- real managers


def _children(pid: int) -> list[int]:
    """The edge workers uvicorn's manager ``pid`` runs now (not multiprocessing's
    resource tracker, its other child)."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
            for child in f.read().split():
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                        if b"spawn_main" in cmdline.read():
                            out.append(int(child))
                except OSError:
                    continue
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
            "ANDROID_EDGE_ID": "edge-a",
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


def test_each_worker_is_its_own_edge_on_the_bus(supervised: EdgeProcess) -> None:
    ids = set(re.findall(r"edge (edge-a-\d+) listening on", supervised.log_text()))
    assert ids == {f"edge-a-{pid}" for pid in _children(supervised.pid)}


def _scrape(edge: EdgeProcess) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def _pheby_connections(text: str) -> float:
    """hdg_edge_connections{dialect="pheby"} in one scrape (every worker's, summed)."""
    (value,) = re.findall(r'^hdg_edge_connections\{dialect="pheby"\} (\S+)$', text, re.M)
    return float(value)


def _frames_in(text: str) -> float:
    (value,) = re.findall(r"^hdg_edge_frames_in_total (\S+)$", text, re.M)
    return float(value)


async def _connections_become(edge: EdgeProcess, count: int) -> None:
    deadline = time.monotonic() + 20
    while _pheby_connections(await asyncio.to_thread(_scrape, edge)) != count:
        assert time.monotonic() < deadline, f"the scrapes never said {count}"
        await asyncio.sleep(0.1)


def test_any_worker_answers_a_scrape_with_every_workers_devices(
    supervised: EdgeProcess,
) -> None:
    paused, serving = _children(supervised.pid)

    async def scenario() -> None:
        # Devices on one worker only, then scrapes answered by the other alone.
        os.kill(paused, signal.SIGSTOP)
        try:
            clients = [await _ready(supervised) for _ in range(6)]
        finally:
            os.kill(paused, signal.SIGCONT)
        clients += [await _ready(supervised) for _ in range(6)]
        try:
            await _connections_become(supervised, 12)
            os.kill(serving, signal.SIGSTOP)
            try:
                for _ in range(3):
                    text = await asyncio.to_thread(_scrape, supervised)
                    assert _pheby_connections(text) == 12
            finally:
                os.kill(serving, signal.SIGCONT)
        finally:
            for client in clients:
                await client.close()
        await _connections_become(supervised, 0)

    asyncio.run(scenario())


def test_a_killed_worker_is_replaced_its_devices_reconnect_and_the_scrape_forgets_it(
    supervised: EdgeProcess,
) -> None:
    first, second = _children(supervised.pid)

    async def scenario() -> None:
        os.kill(second, signal.SIGSTOP)  # every device on the worker about to die
        try:
            doomed = [await _ready(supervised) for _ in range(3)]
        finally:
            os.kill(second, signal.SIGCONT)
        await _connections_become(supervised, 3)
        frames_before = _frames_in(await asyncio.to_thread(_scrape, supervised))
        os.kill(first, signal.SIGKILL)
        for client in doomed:
            assert await client.wait_closed(timeout=15) is not None
        # The devices come back and are served, by the survivor or the replacement.
        again = [await _ready(supervised) for _ in range(3)]
        try:
            await _connections_become(supervised, 3)  # the dead worker's 3 are gone
            await asyncio.to_thread(
                _wait,
                lambda: (
                    len(_children(supervised.pid)) == 2 and first not in _children(supervised.pid)
                ),
            )
            # Its counters stay in the totals: they never go back.
            assert _frames_in(await asyncio.to_thread(_scrape, supervised)) >= frames_before
        finally:
            for client in again:
                await client.close()

    asyncio.run(scenario())
    assert second in _children(supervised.pid)
    assert f"Child process [{first}] died" in supervised.log_text()
    _wait(lambda: _listening_workers(supervised) == 3)
    (replacement,) = set(_children(supervised.pid)) - {second}

    async def served_by_the_replacement() -> None:
        os.kill(second, signal.SIGSTOP)
        try:
            client = await _ready(supervised)
            await client.close()
        finally:
            os.kill(second, signal.SIGCONT)

    asyncio.run(served_by_the_replacement())
    assert f"edge edge-a-{replacement} listening on" in supervised.log_text()


def _stops_gracefully(edge: EdgeProcess, signum: int) -> None:
    """``signum`` with a device online: the device hears 1001 and the edge exits 0."""

    async def signal_with_a_device_online() -> int | None:
        client = await _ready(edge)
        edge.process.send_signal(signum)
        return await client.wait_closed(timeout=15)

    assert asyncio.run(signal_with_a_device_online()) == 1001
    _wait(lambda: not edge.running)
    assert edge.process.returncode == 0


def test_stopping_the_manager_says_going_away_to_devices_and_stops_every_worker(
    supervised: EdgeProcess,
) -> None:
    workers = _children(supervised.pid)
    metrics_dir = Path(_environ(workers[0])["PROMETHEUS_MULTIPROC_DIR"])
    assert metrics_dir.is_dir() and metrics_dir.name.startswith(METRICS_DIR_PREFIX)
    _stops_gracefully(supervised, signal.SIGTERM)
    assert not any(_alive(pid) for pid in workers)
    assert not metrics_dir.exists()  # the workers' metrics files go with them


def test_a_hang_up_replaces_every_worker_one_by_one_while_the_port_serves(
    supervised: EdgeProcess,
) -> None:
    before = set(_children(supervised.pid))
    supervised.process.send_signal(signal.SIGHUP)

    async def serve_meanwhile() -> None:
        deadline = time.monotonic() + 30
        served = 0
        while set(_children(supervised.pid)) & before:
            assert time.monotonic() < deadline, "the workers were not replaced"
            try:
                client = await _ready(supervised)
            except ConnectionClosed as closed:  # caught by a worker as it was stopping
                assert closed.rcvd is not None and closed.rcvd.code in (1001, 1012)
                continue
            except InvalidMessage as cut:
                # Accepted by a worker in the instant it stopped accepting: closed before
                # any byte of a response, which an HTTP client may always retry. Never a
                # wrong or partial answer.
                assert isinstance(cut.__cause__, EOFError), cut
                continue
            served += 1
            await client.close()
        assert served > 0
        client = await _ready(supervised)
        await client.close()

    asyncio.run(serve_meanwhile())
    _wait(lambda: len(_children(supervised.pid)) == 2)
    assert supervised.running


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


def test_workers_stop_by_themselves_when_the_manager_is_killed(
    supervised: EdgeProcess,
) -> None:
    workers = _children(supervised.pid)
    supervised.process.send_signal(signal.SIGKILL)  # the manager alone, not its group
    assert supervised.process.wait(timeout=10) == -signal.SIGKILL
    _wait(lambda: not any(_alive(pid) for pid in workers))


def test_workers_still_starting_when_the_manager_is_killed_stop_by_themselves(
    redis_server: RedisServer, edge_factory: Callable[..., EdgeProcess]
) -> None:
    edge = EdgeProcess(
        env={
            "ANDROID_BUS_URL": redis_server.url,
            "ANDROID_WS_HOST": "127.0.0.1",
            "ANDROID_EDGE_WORKERS": "2",
        },
        port_env="ANDROID_WS_PORT",
    )
    edge.process.start()
    try:
        _wait(lambda: len(_children(edge.pid)) == 2, timeout=30)
        workers = _children(edge.pid)
        os.kill(edge.pid, signal.SIGKILL)  # before they serve (or just after)
        _wait(lambda: not any(_alive(pid) for pid in workers))
    finally:
        edge.stop()


def test_the_metrics_directory_of_a_killed_manager_is_removed_by_the_next_one(
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
    left = Path(_environ(workers[0])["PROMETHEUS_MULTIPROC_DIR"])
    assert left.parent == tmp_path
    first.process.send_signal(signal.SIGKILL)  # no chance to clean up
    first.process.wait(timeout=10)
    _wait(lambda: not any(_alive(pid) for pid in workers))
    assert left.is_dir()
    second = edge_factory(env=env, port_env="ANDROID_WS_PORT")
    _wait(lambda: _listening_workers(second) == 2 and len(_children(second.pid)) == 2)
    assert not left.exists()
    ours = Path(_environ(_children(second.pid)[0])["PROMETHEUS_MULTIPROC_DIR"])
    assert ours.is_dir() and ours.name.startswith(f"{METRICS_DIR_PREFIX}{second.pid}-")


def _tls_workers(redis: RedisServer, tmp_path: Path, cert: Path, key: Path) -> EdgeProcess:
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
def test_a_certificate_the_workers_cannot_load_stops_the_manager_with_one_line(
    redis_server: RedisServer, tmp_path: Path, broken: str
) -> None:
    cert, key = self_signed(tmp_path)
    if broken == "missing certificate":
        cert = tmp_path / "missing.crt"
    else:
        key.write_text("not a key\n")
    edge = _tls_workers(redis_server, tmp_path, cert, key)
    try:
        _wait(lambda: not edge.running)
        assert edge.process.wait(0) == EXIT_BAD_SETTINGS
        assert "edge: bad setting ANDROID_WS_CERT/ANDROID_WS_KEY" in edge.log_text()
        assert "Traceback" not in edge.log_text()
    finally:
        edge.stop()


def test_workers_serve_wss_with_the_configured_certificate(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    edge = _tls_workers(redis_server, tmp_path, cert, key)
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


def test_a_bus_url_the_workers_cannot_open_stops_the_manager_with_one_line(
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
        assert "failed to start, stopping the parent process" in edge.log_text()
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
