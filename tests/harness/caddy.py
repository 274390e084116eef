"""Debian's ``caddy`` running ``deploy/Caddyfile`` in front of edge processes, on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from tests.harness.proc import (
    LOOPBACK,
    REPO_ROOT,
    ManagedProcess,
    free_port,
    http_ok,
    scrubbed_environ,
)

CADDYFILE = REPO_ROOT / "deploy" / "Caddyfile"


def caddy_binary() -> str:
    found = shutil.which("caddy")
    if found is None:  # scripts/test installs it; a missing proxy is a broken set-up
        raise RuntimeError("caddy is not installed (scripts/test installs Debian's package)")
    return found


class CaddyProxy:
    """``caddy run`` of the project's Caddyfile in static mode over ``upstreams``, serving
    plain HTTP on ``127.0.0.1:<port>`` (no certificates, no admin endpoint)."""

    def __init__(self, upstreams: Sequence[str], workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        env = scrubbed_environ(
            {
                "HDG_DOMAIN": f"http://{LOOPBACK}:{self.port}",
                "HDG_UPSTREAM_MODE": "static",
                "HDG_UPSTREAMS": " ".join(upstreams),
                "HDG_CADDY_ADMIN": "off",
                # Caddy keeps state under $HOME / XDG dirs: this run's own.
                "HOME": str(workdir),
                "XDG_DATA_HOME": str(workdir / "data"),
                "XDG_CONFIG_HOME": str(workdir / "config"),
            }
        )
        argv = [caddy_binary(), "run", "--config", str(CADDYFILE), "--adapter", "caddyfile"]
        self.process = ManagedProcess(
            f"caddy:{self.port}", argv, log_path=workdir / "caddy.log", env=env, cwd=workdir
        )

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 30.0) -> CaddyProxy:
        self.process.start()
        self.process.wait_until(
            lambda: http_ok(self.url + "/healthz"), timeout, interval=0.1, what="proxying"
        )
        return self

    def stop(self) -> None:
        self.process.stop()
