"""`hdgctl up` (what `scripts/run` runs) on a home that `hdgctl setup` already configured."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import yaml

from hdgctl.__main__ import main
from tests.harness.hermes_home import HermesHome
from tests.harness.proc import ManagedProcess, free_port, http_ok, scrubbed_environ


def _up_until_serving(home: HermesHome, port: int, tmp_path: Path) -> ManagedProcess:
    """`hdgctl up` on this home until it serves on ``port``, then stopped (Ctrl-C)."""
    up = ManagedProcess(
        "hdgctl-up",
        [sys.executable, "-m", "hdgctl", "up", "--home", str(home.path), "--no-qr"],
        log_path=tmp_path / "up.log",
        env=scrubbed_environ(home.process_env()),
    )
    up.start()
    try:
        up.wait_until(
            lambda: http_ok(f"http://127.0.0.1:{port}/healthz"),
            120,
            what=f"serving on port {port}, the one setup chose",
        )
    finally:
        up.stop(30, first_signal=signal.SIGINT)
    return up


def test_up_serves_on_the_port_setup_chose_and_leaves_the_setting_alone(tmp_path: Path) -> None:
    # A model is configured (never called here), so `up` leaves it as it is.
    home = HermesHome("http://127.0.0.1:9/v1", path=tmp_path / "home", model="other")
    port = free_port()
    assert main(["setup", "--home", str(home.path), "--port", str(port), "--no-qr"]) == 0
    up = _up_until_serving(home, port, tmp_path)
    config = yaml.safe_load(home.config_path.read_text(encoding="utf-8"))
    extra = config["gateway"]["platforms"]["android"]["extra"]
    assert (extra["host"], extra["port"]) == ("127.0.0.1", port)
    assert f"port={port}&" in up.log_text()


def test_up_keeps_a_model_given_in_hermes_short_form(tmp_path: Path) -> None:
    home = HermesHome("http://127.0.0.1:9/v1", path=tmp_path / "home")
    config = yaml.safe_load(home.config_path.read_text(encoding="utf-8"))
    config["model"] = "anthropic/claude-sonnet-4"  # a string, as Hermes also accepts
    home.config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    assert main(["setup", "--home", str(home.path), "--port", str(port), "--no-qr"]) == 0
    up = _up_until_serving(home, port, tmp_path)
    after = yaml.safe_load(home.config_path.read_text(encoding="utf-8"))
    assert after["model"] == "anthropic/claude-sonnet-4"
    assert "scripted model" not in up.log_text()
