"""A real `hermes gateway run` with the plugin, for the benchmarks that measure what a
device sees of Hermes (turn_overhead.py, latency.py, upload_bench.py): embedded (the
plugin's own edge on a loopback port) or on a Redis bus (beside `python -m edge`).

Cleaned up like every harness process: by the caller (``stop()``) or ``stop_all()``.
"""

from __future__ import annotations

from tests.harness.hermes_gateway import HermesGateway, HomeLike
from tests.harness.proc import LOOPBACK, free_port, http_ok


def embedded_gateway(home: HomeLike, token: str, **env: str) -> tuple[HermesGateway, int]:
    """A gateway serving devices itself (not started yet), and the port it will serve on."""
    port = free_port()
    gateway = HermesGateway(home, env={"ANDROID_TOKEN": token, "ANDROID_WS_PORT": str(port), **env})
    return gateway, port


def edge_healthy(port: int, timeout: float = 1.0) -> bool:
    """The embedded edge on ``port`` answers ``/healthz``."""
    return http_ok(f"http://{LOOPBACK}:{port}/healthz", timeout=timeout)


def gateway_on_bus(home: HomeLike, token: str, bus_url: str, timeout: float) -> HermesGateway:
    """A gateway on the Redis bus, started, once its android platform is connected (stopped
    again if it does not connect)."""
    gateway = HermesGateway(home, env={"ANDROID_TOKEN": token, "ANDROID_BUS_URL": bus_url}).start()
    try:
        return gateway.wait_ready(
            lambda: (gateway.platform_state("android") or {}).get("state") == "connected", timeout
        )
    except BaseException:
        gateway.stop()
        raise
