"""``hermes gateway run`` as a managed subprocess with a temp ``HERMES_HOME``."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tests.harness.proc import VENV_BIN, ManagedProcess, scrubbed_environ

# --------------------------------------------------------------------------- Hermes gateway


class HomeLike(Protocol):
    """What :class:`HermesGateway` needs from a home (see ``tests.harness.hermes_home``)."""

    @property
    def path(self) -> Path: ...

    def process_env(self) -> dict[str, str]: ...


class HermesGateway:
    """``<venv>/bin/hermes gateway run -v`` with ``HERMES_HOME`` set, output to a log file.

    ``home`` is a :class:`tests.harness.hermes_home.HermesHome` (anything with ``.path``
    and ``.process_env()``). ``env`` is added on top (ANDROID_TOKEN, ANDROID_BUS_URL ...).
    """

    def __init__(
        self,
        home: HomeLike,
        *,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = ("-v",),
        hermes_bin: str | Path | None = None,
        log_name: str = "gateway-run.log",
        cwd: Path | None = None,
    ) -> None:
        self.home = home
        self.extra_env = dict(env or {})
        binary = Path(hermes_bin) if hermes_bin else VENV_BIN / "hermes"
        if not binary.exists():
            found = shutil.which("hermes")
            if not found:
                raise FileNotFoundError(f"hermes CLI not found at {binary} or on PATH")
            binary = Path(found)
        self.argv = [str(binary), "gateway", "run", *args]
        self.log_path = Path(home.path) / log_name
        self.cwd = cwd or Path(home.path)
        self.process: ManagedProcess | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("gateway was never started")
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def env(self) -> dict[str, str]:
        env = scrubbed_environ(self.home.process_env())
        env.update(self.extra_env)
        return env

    def start(self) -> HermesGateway:
        if self.running:
            raise RuntimeError(f"gateway already running (pid {self.pid})")
        self.process = ManagedProcess(
            "hermes-gateway", self.argv, log_path=self.log_path, env=self.env(), cwd=self.cwd
        )
        self.process.start()
        return self

    # -- readiness ---------------------------------------------------------------------
    def state(self) -> dict[str, Any] | None:
        """``$HERMES_HOME/gateway_state.json`` as written by the gateway, if any."""
        try:
            data = json.loads((Path(self.home.path) / "gateway_state.json").read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def state_is_running(self) -> bool:
        """The gateway (this pid) reports ``gateway_state == "running"``."""
        state = self.state()
        return bool(
            state and state.get("pid") == self.pid and state.get("gateway_state") == "running"
        )

    def platform_state(self, name: str) -> dict[str, Any] | None:
        state = self.state() or {}
        platforms = state.get("platforms") or {}
        entry = platforms.get(name) if isinstance(platforms, dict) else None
        return entry if isinstance(entry, dict) else None

    def wait_ready(
        self,
        predicate: Callable[[], bool] | None = None,
        timeout: float = 60.0,
        interval: float = 0.1,
    ) -> HermesGateway:
        """Poll ``predicate`` (default: gateway_state.json says running) until it holds.

        Fails fast, with the log tail, if the gateway process exits meanwhile.
        """
        if self.process is None:
            raise RuntimeError("gateway was never started")
        self.process.wait_until(predicate or self.state_is_running, timeout, interval=interval)
        return self

    # -- stopping ----------------------------------------------------------------------
    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGINT (Hermes' clean shutdown), then SIGTERM, then SIGKILL; by pid / own group."""
        if self.process is None:
            return None
        return self.process.stop(timeout=timeout, first_signal=signal.SIGINT)

    def kill9(self) -> int:
        if self.process is None:
            raise RuntimeError("gateway was never started")
        return self.process.kill9()

    def restart(
        self,
        predicate: Callable[[], bool] | None = None,
        timeout: float = 60.0,
        *,
        env: Mapping[str, str] | None = None,
    ) -> HermesGateway:
        """Stop (if running), start again with the same home, and wait until ready."""
        if self.running:
            self.stop()
        if env:
            self.extra_env.update(env)
        self.start()
        return self.wait_ready(predicate, timeout)

    # -- logs --------------------------------------------------------------------------
    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def agent_log_text(self) -> str:
        """Hermes' own ``$HERMES_HOME/logs/agent.log`` (more detail than stderr)."""
        try:
            return (Path(self.home.path) / "logs" / "agent.log").read_text(
                encoding="utf-8", errors="replace"
            )
        except FileNotFoundError:
            return ""
