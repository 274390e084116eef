"""The top-level packages import one another in one direction only: no cycle; edges and
workers never reach the plugin, the CLI or Hermes; the plugin never reaches the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("canonical", "edge", "workers", "gateway_plugin", "hdgctl", "scripted_model")
HERMES = ("gateway", "hermes_cli", "hermes_state", "hermes_constants", "tools", "agent", "cron")


def imported_modules(package: str) -> dict[str, set[str]]:
    """For each top-level module name ``package`` imports (anywhere, even inside a
    function): the files that do."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


GRAPH = {package: imported_modules(package) for package in PACKAGES}


def edges(package: str) -> set[str]:
    return {other for other in GRAPH[package] if other in PACKAGES and other != package}


def test_the_packages_import_one_another_without_a_cycle() -> None:
    def cycle_from(start: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(edges(path[-1])):
            if nxt == start:
                return [*path, nxt]
            if nxt not in path:
                found = cycle_from(start, [*path, nxt])
                if found:
                    return found
        return None

    for package in PACKAGES:
        assert cycle_from(package, [package]) is None, " -> ".join(
            cycle_from(package, [package]) or []
        )


def test_the_plugin_never_imports_the_cli() -> None:
    # embedded mode runs an edge and in-process workers; the CLI builds on the plugin
    assert edges("gateway_plugin") <= {"canonical", "edge", "workers"}
    assert "hdgctl" not in GRAPH["gateway_plugin"], GRAPH["gateway_plugin"].get("hdgctl")


def test_edges_and_workers_never_import_the_plugin_the_cli_or_hermes() -> None:
    for package in ("edge", "workers"):
        for forbidden in ("gateway_plugin", "hdgctl", *HERMES):
            assert forbidden not in GRAPH[package], (package, GRAPH[package].get(forbidden))


def test_the_contract_imports_none_of_the_processes() -> None:
    assert edges("canonical") == set()


def test_hermes_is_imported_only_by_the_plugins_seam() -> None:
    importers = {path for name in HERMES for path in GRAPH["gateway_plugin"].get(name, set())}
    assert importers and all(Path(path).parent.name == "hermes" for path in importers), importers
    for package in PACKAGES:
        if package != "gateway_plugin":
            assert not set(GRAPH[package]) & set(HERMES), package
