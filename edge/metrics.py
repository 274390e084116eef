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

In embedded mode the plugin's metrics (``hdg_plugin_*``) live in the same process and
registry, so the embedded edge's `/metrics` shows them too.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from .app import EdgeState
    from .connection import Connection
    from .hub import Hub
    from .worker_metrics import WorkerSnapshots

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


class _HubCollector(Collector):
    def collect(self) -> Iterator[Any]:
        hubs = list(_HUBS)
        conns = [conn for hub in hubs for conn in list(hub.conns.values())]
        by_dialect: dict[str, int] = {"iris": 0, "pheby": 0}
        for conn in conns:
            by_dialect[conn.dialect.name] = by_dialect.get(conn.dialect.name, 0) + 1
        connections = GaugeMetricFamily(
            "hdg_edge_connections", "Authenticated device connections.", labels=["dialect"]
        )
        for dialect, count in sorted(by_dialect.items()):
            connections.add_metric([dialect], count)
        yield connections
        yield GaugeMetricFamily(
            "hdg_edge_tenants",
            "Tenants with at least one device on this edge.",
            value=sum(len(hub.by_tenant) for hub in hubs),
        )
        depths = [conn.queued for conn in conns]
        yield GaugeMetricFamily(
            "hdg_edge_send_queue_frames", "Frames queued to devices.", value=sum(depths)
        )
        yield GaugeMetricFamily(
            "hdg_edge_send_queue_max_frames",
            "Frames queued on the most backed-up connection.",
            value=max(depths, default=0),
        )
        yield CounterMetricFamily(
            "hdg_edge_frames_in",
            "Frames received from devices after hello.",
            value=sum(hub.frames_in for hub in hubs),
        )
        yield CounterMetricFamily(
            "hdg_edge_frames_out",
            "Frames written to devices.",
            value=_frames_out_closed + sum(conn.frames_out for conn in conns),
        )
        yield CounterMetricFamily(
            "hdg_edge_bus_events",
            "Tenant events received from the bus.",
            value=sum(hub.events_in for hub in hubs),
        )


REGISTRY.register(_HubCollector())


def render() -> bytes:
    """This process's metrics, in the Prometheus text format."""
    return generate_latest(REGISTRY)


def endpoint(
    state: EdgeState, workers: WorkerSnapshots | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """The `/metrics` route of one edge app (tracks its hub). A supervised worker answers
    with every worker's metrics, labelled (edge/worker_metrics.py)."""
    track(state.hub)

    async def metrics(request: Request) -> Response:
        body = render() if workers is None else workers.exposition()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return metrics


__all__ = [
    "CONTROL_CLOSES",
    "HELLO_FAILURES",
    "LOCKOUTS",
    "REPLAYED_EVENTS",
    "REPLAYS",
    "connection_closed",
    "control_closed",
    "endpoint",
    "hello_refused",
    "render",
    "replayed",
    "track",
]
