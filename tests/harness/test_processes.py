"""The process harness itself: real redis-server, scripted model, hermes gateway."""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import proc as harness_proc
from tests.harness.hermes_home import HermesHome
from tests.harness.processes import (
    EdgeProcess,
    HermesGateway,
    ManagedProcess,
    ProcessFailed,
    RedisServer,
    ScriptedModel,
    free_port,
    live_processes,
    port_is_open,
)


def redis_command(server: RedisServer, *parts: str) -> bytes:
    """Send one RESP command over a raw socket and return the raw reply."""
    payload = f"*{len(parts)}\r\n".encode() + b"".join(
        f"${len(p.encode())}\r\n{p}\r\n".encode() for p in parts
    )
    with socket.create_connection((server.host, server.port), timeout=2) as sock:
        sock.sendall(payload)
        return sock.recv(4096)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); check its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_free_port_returns_a_bindable_loopback_port() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_free_ports_come_in_turn_from_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(6)]
    assert len(set(ports)) == 6
    assert all(10_000 <= port < 32_768 for port in ports)


def test_free_port_skips_a_port_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = free_port()
    block = harness_proc._PORT_BLOCK
    start = taken - (taken - harness_proc._PORT_BASE) % block
    monkeypatch.setattr(harness_proc, "_port_turn", itertools.count(taken - start))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        assert free_port() == start + (taken - start + 1) % block


def test_a_private_redis_answers_ping_and_keeps_data_in_memory(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    assert server.url == f"redis://127.0.0.1:{server.port}/0"
    assert server.ping()
    assert redis_command(server, "SET", "k", "v") == b"+OK\r\n"
    assert redis_command(server, "GET", "k") == b"$1\r\nv\r\n"
    assert redis_command(server, "CONFIG", "GET", "save").endswith(b"$0\r\n\r\n")
    assert b"appendonly\r\n$2\r\nno" in redis_command(server, "CONFIG", "GET", "appendonly")


def test_redis_kill9_drops_the_server_and_restart_brings_it_back_empty_on_the_same_port(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    port, old_pid = server.port, server.pid
    redis_command(server, "SET", "k", "v")
    server.kill9()
    assert not server.running
    assert not server.ping()
    assert not port_is_open("127.0.0.1", port)
    server.restart()
    assert server.port == port
    assert server.pid != old_pid
    assert server.ping()
    assert redis_command(server, "GET", "k") == b"$-1\r\n"  # nothing persisted


def test_redis_restart_while_running_stops_the_old_process_first(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    old_pid = server.pid
    server.restart()
    assert not pid_alive(old_pid)
    assert server.ping()


def test_redis_stop_reaps_the_process_and_forgets_it(
    redis_factory: Callable[..., RedisServer],
) -> None:
    server = redis_factory()
    pid = server.pid
    assert any(p.pid == pid for p in live_processes())
    server.stop()
    assert not pid_alive(pid)
    assert all(p.pid != pid for p in live_processes() if p.running)


def test_a_process_that_exits_early_fails_fast_with_its_log_tail(tmp_path: Path) -> None:
    edge = EdgeProcess(module="scripted_model", args=["--port", "not-a-port"], workdir=tmp_path)
    started = time.monotonic()
    with pytest.raises(ProcessFailed) as caught:
        edge.start(timeout=30)
    assert time.monotonic() - started < 10
    assert "exited with code 2" in str(caught.value)
    assert "invalid int value" in str(caught.value)


def test_edge_process_substitutes_the_port_and_waits_for_health(tmp_path: Path) -> None:
    edge = EdgeProcess(
        module="scripted_model",
        args=["--port", "{port}"],
        health_path="/_health",
        workdir=tmp_path,
    )
    edge.start()
    try:
        assert edge.healthy()
        pid = edge.pid
        edge.kill9()
        assert not pid_alive(pid)
        edge.restart()
        assert edge.healthy()
    finally:
        edge.stop()


def test_stop_kills_children_left_in_the_process_group(tmp_path: Path) -> None:
    proc = ManagedProcess(
        "sh-with-child",
        ["sh", "-c", "sleep 60 & printf 'ch%s=%s\\n' ild $!; wait"],
        log_path=tmp_path / "sh.log",
    ).start()
    deadline = time.monotonic() + 5
    while "child=" not in proc.log_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    child = int(proc.log_text().split("child=")[1].split()[0])
    assert pid_alive(child)
    proc.stop(timeout=2)
    deadline = time.monotonic() + 2
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(child)


def test_the_scripted_model_harness_waits_for_health_and_reads_the_log(tmp_path: Path) -> None:
    with ScriptedModel(workdir=tmp_path) as model:
        assert model.base_url == f"http://127.0.0.1:{model.port}/v1"
        assert model.healthy()
        assert model.log() == []
    assert not model.healthy()


def test_a_hermes_gateway_starts_reports_running_and_stops_cleanly_on_sigint(
    hermes_home_factory: Callable[..., HermesHome],
) -> None:
    home = hermes_home_factory(plugins_enabled=[])
    gateway = HermesGateway(home).start()
    try:
        started = time.monotonic()
        gateway.wait_ready(timeout=60)
        ready_after = time.monotonic() - started
        assert ready_after < 30
        state = gateway.state()
        assert state is not None and state["gateway_state"] == "running"
        assert "Starting Hermes Gateway" in gateway.log_text()
    finally:
        code = gateway.stop()
    assert code == 0
    state = gateway.state()
    assert state is not None and state["gateway_state"] == "stopped"


def test_a_hermes_gateway_comes_back_after_kill9(
    hermes_home_factory: Callable[..., HermesHome],
) -> None:
    home = hermes_home_factory(plugins_enabled=[])
    gateway = HermesGateway(home).start().wait_ready(timeout=60)
    try:
        first_pid = gateway.pid
        gateway.kill9()
        assert not pid_alive(first_pid)
        gateway.restart(timeout=60)
        assert gateway.pid != first_pid
        assert gateway.state_is_running()
    finally:
        gateway.stop()


def test_waiting_for_a_gateway_that_never_gets_ready_times_out_with_its_log(
    hermes_home_factory: Callable[..., HermesHome],
) -> None:
    home = hermes_home_factory(plugins_enabled=[])
    gateway = HermesGateway(home).start()
    try:
        with pytest.raises(ProcessFailed) as caught:
            gateway.wait_ready(lambda: False, timeout=2)
        assert "was not ready within 2.0s" in str(caught.value)
    finally:
        gateway.stop()


def test_a_scrubbed_environment_drops_android_settings_but_keeps_the_fast_path_switch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANDROID_TOKEN", "from-the-outer-shell")
    monkeypatch.setenv("ANDROID_FASTPATH", "off")
    env = harness_proc.scrubbed_environ({"ANDROID_WS_PORT": "1"})
    assert "ANDROID_TOKEN" not in env
    assert env["ANDROID_FASTPATH"] == "off" and env["ANDROID_WS_PORT"] == "1"
