"""No Python module of the product is over 500 lines: one that grows past it holds more
than one responsibility and is split by them (as the controller and the attachment
registry were)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway_plugin", "canonical", "edge", "workers", "hdgctl")
MAX_LINES = 500


def line_counts() -> dict[str, int]:
    return {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def test_every_package_has_modules_to_measure() -> None:
    counts = line_counts()
    for package in PACKAGES:
        assert any(name.startswith(f"{package}/") for name in counts), package


def test_no_module_is_over_500_lines() -> None:
    over = {name: n for name, n in line_counts().items() if n > MAX_LINES}
    assert not over, f"split these by responsibility: {over}"
