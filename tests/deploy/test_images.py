"""The images: one Dockerfile target per role, each installing only what that role runs,
from the committed constraints, which pip can satisfy for every role as they stand.

No Docker engine runs here, so the installs are checked with pip itself (`--dry-run`
against the package index), the way each target's RUN line makes them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"
ROLES = {"edge": ".", "worker": ".[media]", "gateway": ".[gateway]"}


def targets() -> dict[str, str]:
    """target name -> what its pip install line installs."""
    found: dict[str, str] = {}
    current = None
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"FROM \S+ AS (\w+)", line):
            current = match.group(1)
        elif current and (match := re.search(r"pip install -c deploy/constraints.txt (\S+)", line)):
            found[current] = match.group(1).strip('"')
    return found


def pins() -> dict[str, str]:
    pinned = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pinned[name] = version
    return pinned


def test_each_role_has_a_target_installing_only_what_it_runs() -> None:
    assert targets() == ROLES


def test_compose_builds_each_service_from_its_own_target() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = {"edge": "edge", "gateway": "gateway", "push-worker": "worker"}
    services |= {"media-worker": "worker", "maintenance-worker": "worker"}
    for name, role in services.items():
        build = compose["services"][name]["build"]
        assert build["target"] == role and build["dockerfile"] == "deploy/Dockerfile"
        assert compose["services"][name]["image"] == f"hermes-device-gateway-{role}:local"


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_constraints_pin_everything_a_role_installs(role: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            "-c",
            str(CONSTRAINTS),
            ROLES[role],
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    installed = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text(encoding="utf-8"))["install"]
        if item["metadata"]["name"] != "hermes-device-gateway"
    }
    pinned = pins()
    assert {name: pinned.get(name) for name in installed} == installed
    if role == "edge":
        assert not {"hermes-agent", "av", "pillow"} & installed.keys()
    if role == "worker":
        assert "hermes-agent" not in installed and {"av", "pillow"} <= installed.keys()
