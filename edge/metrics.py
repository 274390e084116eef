"""Prometheus metrics of an edge, served on `GET /metrics` (default registry).

Gauges and the frame counters are read from the live hubs when Prometheus scrapes, so the
hot path pays nothing for them. Events that leave no state behind (replays, refused
hellos, lock-outs, control closes) are counted where they happen, one line each.

Names (all prefixed ``hdg_edge_``):

- ``connections{dialect}``            authenticated device connections now
- ``tenants``                         tenants with at least one device on this edge
- ``send_queue_frames``               frames queued to devices, all connections
- ``send_queue_max_frames``           the deepest single connection queue
- ``frames_in_total``                 frames received from devices after hello
- ``frames_out_total``                frames written to devices
- ``bus_events_total``                tenant events received from the bus
- ``replays_total`` / ``replayed_events_total``   replays served and events they carried
- ``hello_failures_total{code}``      refused hellos (unauthorized, version_mismatch …)
- ``lockouts_total``                  connections refused because the address is locked out
- ``control_closes_total{action}``    connections closed by the plugin (revoke, rotate)
- ``unauthenticated_refused_total``   sockets refused: their address held too many that
                                      were not past their request header or hello
- ``slow_requests_total{phase}``      requests cut for a header (``header``) or an upload
                                      body (``body``) that stopped coming

With ``ANDROID_EDGE_WORKERS`` > 1 every worker copies its hub figures into
prometheus_client's multiprocess files (``SharedFigures``) and a scrape answers for all.

In embedded mode the plugin's metrics (``hdg_plugin_*``) live in the same process and
registry, so the embedded edge's `/metrics` shows them too.
"""

from __future__ import annotations

import contextlib
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from .app import EdgeState
    from .connection import Connection
    from .hub import Hub

REPLAYS = Counter("hdg_edge_replays_total", "Replays (hello or sync) served to devices.")
REPLAYED_EVENTS = Counter("hdg_edge_replayed_events_total", "Events delivered by replays.")
HELLO_FAILURES = Counter("hdg_edge_hello_failures_total", "Refused hellos by error code.", ["code"])
LOCKOUTS = Counter(
    "hdg_edge_lockouts_total", "Connections refused because their address is locked out."
)
CONTROL_CLOSES = Counter(
    "hdg_edge_control_closes_total",
    "Connections closed on the plugin's order (revocation, token rotation).",
    ["action"],
)
UNAUTHENTICATED_REFUSED = Counter(
    "hdg_edge_unauthenticated_refused_total",
    "Sockets refused: their address held too many not past their request header or hello.",
)
SLOW_REQUESTS = Counter(
    "hdg_edge_slow_requests_total",
    "Requests cut because their header or upload body stopped coming.",
    ["phase"],
)

_HUBS: weakref.WeakSet[Hub] = weakref.WeakSet()
_frames_out_closed = 0


def track(hub: Hub) -> None:
    _HUBS.add(hub)


def connection_closed(conn: Connection) -> None:
    """Keep the frames a closing connection wrote in the process total."""
    global _frames_out_closed
    _frames_out_closed += conn.frames_out


def replayed(events: int, *, done: bool = True) -> None:
    """One replay chunk delivered; a replay counts once, when its last chunk arrives."""
    if done:
        REPLAYS.inc()
    if events:
        REPLAYED_EVENTS.inc(events)


def hello_refused(code: str) -> None:
    HELLO_FAILURES.labels(code=code).inc()


def control_closed(action: str, count: int) -> None:
    if count:
        CONTROL_CLOSES.labels(action=action).inc(count)


@dataclass(frozen=True)
class Figures:
    """What this process's hubs hold now, and their running totals."""

    connections: dict[str, int]
    tenants: int
    queued: int
    max_queued: int
    frames_in: int
    frames_out: int
    bus_events: int


def figures() -> Figures:
    hubs = list(_HUBS)
    conns = [conn for hub in hubs for conn in list(hub.conns.values())]
    by_dialect: dict[str, int] = {"iris": 0, "pheby": 0}
    for conn in conns:
        by_dialect[conn.dialect.name] = by_dialect.get(conn.dialect.name, 0) + 1
    depths = [conn.queued for conn in conns]
    return Figures(
        connections=by_dialect,
        tenants=sum(len(hub.by_tenant) for hub in hubs),
        queued=sum(depths),
        max_queued=max(depths, default=0),
        frames_in=sum(hub.frames_in for hub in hubs),
        frames_out=_frames_out_closed + sum(conn.frames_out for conn in conns),
        bus_events=sum(hub.events_in for hub in hubs),
    )


_HELP = {
    "connections": "Authenticated device connections.",
    "tenants": "Tenants with at least one device on this edge.",
    "queued": "Frames queued to devices.",
    "max_queued": "Frames queued on the most backed-up connection.",
    "frames_in": "Frames received from devices after hello.",
    "frames_out": "Frames written to devices.",
    "bus_events": "Tenant events received from the bus.",
}


class _HubCollector(Collector):
    def collect(self) -> Iterator[Any]:
        now = figures()
        connections = GaugeMetricFamily(
            "hdg_edge_connections", _HELP["connections"], labels=["dialect"]
        )
        for dialect, count in sorted(now.connections.items()):
            connections.add_metric([dialect], count)
        yield connections
        yield GaugeMetricFamily("hdg_edge_tenants", _HELP["tenants"], value=now.tenants)
        yield GaugeMetricFamily("hdg_edge_send_queue_frames", _HELP["queued"], value=now.queued)
        yield GaugeMetricFamily(
            "hdg_edge_send_queue_max_frames", _HELP["max_queued"], value=now.max_queued
        )
        yield CounterMetricFamily("hdg_edge_frames_in", _HELP["frames_in"], value=now.frames_in)
        yield CounterMetricFamily("hdg_edge_frames_out", _HELP["frames_out"], value=now.frames_out)
        yield CounterMetricFamily("hdg_edge_bus_events", _HELP["bus_events"], value=now.bus_events)


REGISTRY.register(_HubCollector())


def render() -> bytes:
    """This process's metrics, in the Prometheus text format."""
    return generate_latest(REGISTRY)


class SharedFigures:
    """This worker's hub figures in prometheus_client's multiprocess files, where the
    worker answering a scrape finds every worker's (``ANDROID_EDGE_WORKERS`` > 1).

    The hot path still only bumps plain integers: the figures are copied into the files
    every ``PUBLISH_S`` and by the worker answering a scrape, just before it answers.
    Gauges count live workers only (``livesum``/``livemax``); counters keep the totals of
    workers that died, as a counter must.
    """

    def __init__(self) -> None:
        self.connections = Gauge(
            "hdg_edge_connections",
            _HELP["connections"],
            ["dialect"],
            multiprocess_mode="livesum",
            registry=None,
        )
        self.tenants = Gauge(
            "hdg_edge_tenants", _HELP["tenants"], multiprocess_mode="livesum", registry=None
        )
        self.queued = Gauge(
            "hdg_edge_send_queue_frames",
            _HELP["queued"],
            multiprocess_mode="livesum",
            registry=None,
        )
        self.max_queued = Gauge(
            "hdg_edge_send_queue_max_frames",
            _HELP["max_queued"],
            multiprocess_mode="livemax",
            registry=None,
        )
        self.totals = {
            "frames_in": Counter("hdg_edge_frames_in", _HELP["frames_in"], registry=None),
            "frames_out": Counter("hdg_edge_frames_out", _HELP["frames_out"], registry=None),
            "bus_events": Counter("hdg_edge_bus_events", _HELP["bus_events"], registry=None),
        }
        self._published = dict.fromkeys(self.totals, 0)

    def publish(self) -> None:
        now = figures()
        for dialect, count in now.connections.items():
            self.connections.labels(dialect=dialect).set(count)
        self.tenants.set(now.tenants)
        self.queued.set(now.queued)
        self.max_queued.set(now.max_queued)
        for name, counter in self.totals.items():
            value = getattr(now, name)
            if value > self._published[name]:
                counter.inc(value - self._published[name])
                self._published[name] = value


# prometheus_client's multiprocess functions, typed.
mark_dead: Callable[[int, str], None] = multiprocess.mark_process_dead
_multiprocess_collector: Callable[[CollectorRegistry, str], object] = (
    multiprocess.MultiProcessCollector
)


def dead_workers(names: Iterable[str], alive: Callable[[int], bool]) -> set[int]:
    """The pids, among multiprocess file names, of live-gauge files whose process is gone."""
    pids = set()
    for name in names:
        match = _LIVE_GAUGE_FILE.fullmatch(name)
        if match is not None:
            pids.add(int(match.group(1)))
    return {pid for pid in pids if not alive(pid)}


_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: alive
        return True
    return True


def render_all(directory: str) -> bytes:
    """Every worker's metrics from the multiprocess files in ``directory``. A worker
    killed outright never said it died: its live gauges are dropped here."""
    for pid in dead_workers(os.listdir(directory), _pid_alive):
        with contextlib.suppress(FileNotFoundError):  # another worker's scrape was first
            mark_dead(pid, directory)
    registry = CollectorRegistry()
    _multiprocess_collector(registry, directory)
    return generate_latest(registry)


def endpoint(
    state: EdgeState, shared: SharedFigures | None = None, directory: str | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """The `/metrics` route of one edge app (tracks its hub). A worker of several
    (``shared`` and its ``directory`` given) answers with every worker's metrics."""
    track(state.hub)

    async def metrics(request: Request) -> Response:
        if shared is None or directory is None:
            body = render()
        else:
            shared.publish()
            body = render_all(directory)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return metrics


__all__ = [
    "CONTROL_CLOSES",
    "HELLO_FAILURES",
    "LOCKOUTS",
    "REPLAYED_EVENTS",
    "REPLAYS",
    "Figures",
    "SharedFigures",
    "connection_closed",
    "control_closed",
    "dead_workers",
    "mark_dead",
    "endpoint",
    "figures",
    "hello_refused",
    "render",
    "render_all",
    "replayed",
    "track",
]
