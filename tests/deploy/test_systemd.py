"""The systemd units, checked by systemd itself (`systemd-analyze verify`) and for what a
host running many instances needs: ports for any instance number, a writable attachments
directory, and no reload that would kill a worker without draining it."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/hermes-device-gateway"
ATTACHMENTS = "/var/lib/hermes-device-gateway/attachments"
WORKERS = {
    "hdg-push-worker": "PushWorker",
    "hdg-media-worker": "MediaWorker",
    "hdg-maintenance-worker": "MaintenanceWorker",
}


def unit(name: str) -> configparser.ConfigParser:
    # systemd allows repeated keys (Environment=); keep the last, and read them apart below.
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((UNITS / name).read_text(encoding="utf-8"))
    return parser


def environment(name: str, instance: str) -> dict[str, str]:
    """The unit's Environment= lines with %i expanded as systemd would for ``instance``."""
    pairs = {}
    for line in (UNITS / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("Environment="):
            key, _, value = line.removeprefix("Environment=").partition("=")
            pairs[key] = value.replace("%i", instance)
    return pairs


def test_systemd_accepts_the_units_and_the_target(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is part of Debian's systemd package"
    # The units name the installed tree; point them at this checkout and its virtualenv.
    for path in UNITS.glob("hdg*"):
        text = path.read_text(encoding="utf-8").replace(f"{INSTALLED}/.venv", sys.prefix)
        text = text.replace(INSTALLED, str(ROOT))
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    names = ["hdg-edge@8801.service", *(f"{w}@9461.service" for w in WORKERS), "hdg.target"]
    result = subprocess.run(
        [analyze, "verify", *(str(tmp_path / name) for name in names)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and str(tmp_path) in line or "hdg" in line
    ]
    assert result.returncode == 0 and not problems, result.stdout + result.stderr


@pytest.mark.parametrize("worker", WORKERS)
@pytest.mark.parametrize("instance", ["9461", "9470", "19999"])
def test_every_worker_instance_gets_a_valid_metrics_port_of_its_own(
    worker: str, instance: str
) -> None:
    port = int(environment(f"{worker}@.service", instance)["HDG_WORKER_METRICS_PORT"])
    assert port == int(instance) and 0 < port < 65536


@pytest.mark.parametrize("worker", WORKERS)
def test_each_queue_has_its_own_arq_worker_process(worker: str) -> None:
    service = unit(f"{worker}@.service")["Service"]
    assert service["ExecStart"].endswith(f"bin/arq workers.settings.{WORKERS[worker]}")


def test_the_target_starts_a_worker_for_every_queue() -> None:
    wants = " ".join(
        line.removeprefix("Wants=")
        for line in (UNITS / "hdg.target").read_text(encoding="utf-8").splitlines()
        if line.startswith("Wants=")
    ).split()
    for worker in WORKERS:
        assert any(name.startswith(f"{worker}@") for name in wants), worker


@pytest.mark.parametrize("worker", WORKERS)
def test_a_worker_is_never_reloaded_with_a_signal_arq_does_not_drain_on(worker: str) -> None:
    service = unit(f"{worker}@.service")["Service"]
    assert "ExecReload" not in service
    assert service["KillSignal"] == "SIGTERM"
    assert service["Restart"] == "always"
    assert int(service["TimeoutStopSec"]) >= 60  # twice HDG_JOB_COMPLETION_WAIT


def test_edges_and_workers_share_a_writable_attachments_directory() -> None:
    for name, variable in (
        ("hdg-edge@.service", "ANDROID_ATTACHMENTS_DIR"),
        *((f"{worker}@.service", "HDG_MEDIA_ROOT") for worker in WORKERS),
    ):
        service = unit(name)["Service"]
        assert service["ProtectSystem"] == "strict"
        # StateDirectory= is created for User= and exempt from ProtectSystem=strict.
        assert "/var/lib/" + service["StateDirectory"] == ATTACHMENTS
        assert environment(name, "1")[variable] == ATTACHMENTS


def test_the_edge_unit_is_a_template_whose_instance_is_the_port() -> None:
    service = unit("hdg-edge@.service")["Service"]
    assert service["ExecStart"].endswith("python -m edge")
    assert environment("hdg-edge@.service", "8801")["ANDROID_WS_PORT"] == "8801"
    assert service["KillSignal"] == "SIGTERM"
