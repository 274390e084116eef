"""`python -m edge`: one stateless edge process on the Redis bus (scaled mode)."""

from __future__ import annotations

import gc
import logging
import sys

from canonical import fastpath, logredact
from canonical.bus import open_bus
from canonical.errors import SettingsError
from canonical.settings import GatewaySettings, load_settings

from .app import build_app
from .server import GracefulServer, check_tls, make_state, uvicorn_config
from .supervisor import Supervisor, inherited_sockets, listen_sockets, watch_parent, worker_edge_id

GC_YOUNG_THRESHOLD = 10_000


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logredact.install()  # tokens, secrets and message bodies never reach a log line
    try:
        settings = load_settings()
        check_tls(settings)
    except SettingsError as exc:
        print(f"edge: bad setting {exc}", file=sys.stderr)
        return 2
    if settings.embedded:
        print(
            "edge: ANDROID_BUS_URL is memory:// — a standalone edge needs the shared bus "
            "(redis://host:port/db). In embedded mode the edge runs inside `hermes gateway run`.",
            file=sys.stderr,
        )
        return 2
    socks = inherited_sockets()
    if socks is None and settings.edge_workers > 1:
        return supervise(settings)
    settings.edge_id = worker_edge_id(settings.edge_id)
    fastpath.configure(settings.fastpath)
    try:
        bus = open_bus(settings.bus_url, settings.redis_timeouts())
    except ValueError as exc:  # a URL the scheme check let through: a port, a query option
        # Exit 2, as for any bad setting: a supervisor then stops instead of restarting
        # workers that can never start.
        print(f"edge: bad setting ANDROID_BUS_URL: {exc}", file=sys.stderr)
        return 2
    state = make_state(settings, bus)
    app = build_app(state, own_bus=True)
    config = uvicorn_config(app, settings)
    server = GracefulServer(config)
    watch_parent(server.request_exit)
    logging.getLogger("hdg.edge").info(
        "edge %s listening on %s:%d", state.edge_id, settings.ws_host, settings.ws_port
    )
    gc.freeze()  # start-up objects never need scanning again: keeps GC off the hot path
    # Connection set-ups allocate many container objects. At the default young threshold
    # (700) a storm of 5,000 hellos ran ~800 young, ~70 middle and 5 full collections (a
    # full one scans every live connection's objects): ~24 % of the edge's CPU (py-spy
    # --native). Refcounting frees nearly all of it anyway; at 10,000: no full collection.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    try:
        server.run(sockets=socks)
    except KeyboardInterrupt:
        # uvicorn re-raises a captured SIGINT once it has shut down gracefully (Ctrl-C in
        # a terminal reaches every worker too): the shutdown is done, not an error.
        pass
    return 0


def supervise(settings: GatewaySettings) -> int:
    """ANDROID_EDGE_WORKERS > 1: bind once, run that many edge processes on the socket."""
    try:
        socks = listen_sockets(settings.ws_host, settings.ws_port)
    except OSError as exc:
        print(
            f"edge: cannot listen on {settings.ws_host}:{settings.ws_port}: {exc}", file=sys.stderr
        )
        return 2
    logging.getLogger("hdg.edge").info(
        "edge supervisor: %d workers listening on %s:%d",
        settings.edge_workers,
        settings.ws_host,
        settings.ws_port,
    )
    return Supervisor(socks, settings.edge_workers).run()


if __name__ == "__main__":
    sys.exit(main())
