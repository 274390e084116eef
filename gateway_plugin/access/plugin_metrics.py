"""The plugin's Prometheus metrics: gauges of every running controller, and
``ANDROID_METRICS_PORT``'s /metrics server (scaled mode)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gateway_plugin.controller import Controller

log = logging.getLogger("hdg.plugin.admin")

P = ParamSpec("P")
T = TypeVar("T")

# The running controllers of this process (admin.attach / admin.detach).
_CONTROLLERS: weakref.WeakSet[Controller] = weakref.WeakSet()


class _PluginCollector(Collector):
    def collect(self) -> Iterator[Any]:
        head = GaugeMetricFamily(
            "hdg_plugin_outbox_head", "Cursor of the newest sequenced event.", labels=["tenant"]
        )
        queue = GaugeMetricFamily(
            "hdg_plugin_publish_queue",
            "Events sequenced but not yet published to the bus.",
            labels=["tenant"],
        )
        runs = GaugeMetricFamily(
            "hdg_plugin_active_runs", "Agent runs in progress.", labels=["tenant"]
        )
        devices = GaugeMetricFamily(
            "hdg_plugin_devices", "Devices in the registry.", labels=["tenant", "state"]
        )
        lag = GaugeMetricFamily(
            "hdg_plugin_loop_lag_seconds",
            "How late the gateway's event loop woke a 1 ms sleep (ANDROID_LOOP_PROBE).",
            labels=["tenant", "stat"],
        )
        for controller in list(_CONTROLLERS):
            if not controller.running:
                continue
            tenant = controller.tenant
            with contextlib.suppress(Exception):  # closing concurrently: skip this scrape
                head.add_metric([tenant], controller.outbox.head())
                queue.add_metric([tenant], controller.publisher.queue.qsize())
                runs.add_metric([tenant], len(controller.turns.runs))
                for state, count in _device_counts(controller).items():
                    devices.add_metric([tenant, state], count)
                if controller.loop_probe is not None:
                    figures = controller.loop_probe.figures()
                    for stat, ms in (
                        ("p50", figures.p50_ms),
                        ("p99", figures.p99_ms),
                        ("max", figures.max_ms),
                    ):
                        lag.add_metric([tenant, stat], ms / 1000)
        yield head
        yield queue
        yield runs
        yield devices
        yield lag


REGISTRY.register(_PluginCollector())

# Each controller's device counts as last read on devices.db's thread.
_COUNTS: weakref.WeakKeyDictionary[Controller, dict[str, int]] = weakref.WeakKeyDictionary()


def _device_counts(controller: Controller) -> dict[str, int]:
    """The registry's counts. A scrape on the event loop (the embedded edge's /metrics)
    answers those of the previous scrape and queues a fresh read on devices.db's thread;
    the metrics server's own thread reads them in place."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return controller.devices.counts()
    controller.storage.devices.run_nowait(_read_counts, controller)
    return _COUNTS.get(controller, {})


def _read_counts(controller: Controller) -> None:
    _COUNTS[controller] = controller.devices.counts()


def counted(controller: Controller, change: Callable[P, T]) -> Callable[P, T]:
    """`change` (a devices.db write, on its thread), then the counts read afresh."""

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        result = change(*args, **kwargs)
        _read_counts(controller)
        return result

    return run


class _MetricsServer:
    """``ANDROID_METRICS_PORT``: the plugin's /metrics on its own port (scaled mode)."""

    def __init__(self) -> None:
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start_if_configured(self, host: str, port: int | None) -> None:
        if port is None or self._server is not None:
            return
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(port, addr=host)
        except (OSError, ValueError) as exc:
            log.error("plugin metrics not served on %s:%s: %s", host, port, exc)
            return
        log.info("plugin metrics on http://%s:%s/metrics", host, port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(5)
            self._server = None
            self._thread = None


_metrics_server = _MetricsServer()
