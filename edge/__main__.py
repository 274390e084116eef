"""`python -m edge`: one stateless edge process on the Redis bus (scaled mode), or with
``ANDROID_EDGE_WORKERS`` > 1 several on one port under uvicorn's process manager."""

from __future__ import annotations

import logging
import sys

from canonical import fastpath, logredact
from canonical.bus import open_bus
from canonical.errors import SettingsError
from canonical.settings import load_settings

from . import workers
from .app import build_app
from .server import (
    GC_YOUNG_THRESHOLD,
    GracefulServer,
    check_tls,
    make_state,
    tune_gc,
    uvicorn_config,
)

__all__ = ["GC_YOUNG_THRESHOLD", "main"]


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format=workers.LOG_FORMAT)
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
    if settings.edge_workers > 1:
        return workers.run(settings)
    fastpath.configure(settings.fastpath)
    try:
        bus = open_bus(settings.bus_url, settings.redis_timeouts())
    except ValueError as exc:  # a URL the scheme check let through: a port, a query option
        print(f"edge: bad setting ANDROID_BUS_URL: {exc}", file=sys.stderr)
        return 2
    state = make_state(settings, bus)
    app = build_app(state, own_bus=True)
    config = uvicorn_config(app, settings)
    server = GracefulServer(config)
    logging.getLogger("hdg.edge").info(
        "edge %s listening on %s:%d", state.edge_id, settings.ws_host, settings.ws_port
    )
    tune_gc()
    try:
        server.run()
    except KeyboardInterrupt:
        # uvicorn re-raises a captured SIGINT once it has shut down gracefully (Ctrl-C in
        # a terminal): the shutdown is done, not an error.
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
