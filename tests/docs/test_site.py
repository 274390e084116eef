"""The documentation site: it builds strictly, its configuration reference covers every
setting, and no document speaks of how the work was organised instead of the product."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from canonical.settings import GatewaySettings, documented_name
from tests.harness.proc import REPO_ROOT
from workers.config import WorkerConfig


def _load_hook() -> ModuleType:
    path = REPO_ROOT / "docs" / "hooks" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


config_reference = _load_hook()

MKDOCS = Path(sys.executable).parent / "mkdocs"
DIARY = re.compile(
    r"\bwork(?:ing)? sessions?\b|\bsession \d+"  # how the work was organised
    r"|\bissue #?\d+|\(issue|\(#\d+\)"  # issue numbers
    r"|\b(?:issues?|bugs?|PRs?|pull requests?|tickets?|fix(?:es|ed)?|closes|see) #\d+"
    r"|optimi[sz]ation #?\d+|measurement \d+"  # numbered steps of the work
    r"|\b(?:engineers?|coordinators?|colleagues?|teammates?)\b",  # people
    re.IGNORECASE,
)
SCANNED_SUFFIXES = (
    ".py",
    ".md",
    ".sh",
    ".yaml",
    ".yml",
    ".toml",
    ".c",
    ".js",
    ".css",
    ".html",
    ".service",
    ".target",
    ".txt",
)
SCANNED_NAMES = ("Dockerfile", "Caddyfile")
SCANNED_DIRS = ("scripts/", ".ci/")  # executables without a suffix


def test_the_site_builds_with_no_warning(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO_ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "site" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "ANDROID_BUS_URL" in page and "HDG_MEDIA_MAX_MEMORY_MB" in page
    assert "<!-- settings:" not in page


def test_every_setting_has_a_description_and_a_row_in_the_reference() -> None:
    for model in (GatewaySettings, WorkerConfig):
        table = config_reference.settings_table(model)
        for name, field in model.model_fields.items():
            variable = documented_name(field)
            assert variable, f"{model.__name__}.{name} has no environment variable"
            assert field.description, f"{variable} has no description"
            assert f"| `{variable}` |" in table


def test_every_variable_the_code_reads_directly_is_documented() -> None:
    reference = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    generated = {
        documented_name(field)
        for model in (GatewaySettings, WorkerConfig)
        for field in model.model_fields.values()
    }
    read = set()
    for package in ("canonical", "edge", "gateway_plugin", "workers", "hdgctl"):
        for path in (REPO_ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            read |= set(
                re.findall(r"environ(?:\.get)?\(\s*\"((?:ANDROID|NTFY|HDG)_[A-Z0-9_]+)\"", text)
            )
            read |= set(re.findall(r"environ\[\"((?:ANDROID|NTFY|HDG)_[A-Z0-9_]+)\"\]", text))
    undocumented = {name for name in read if name not in generated and f"`{name}`" not in reference}
    assert not undocumented, f"read from the environment but not documented: {sorted(undocumented)}"


def scanned_files() -> list[str]:
    """Every tracked text file a reader sees: docs, code, tests, CHANGELOG, deployment
    files and scripts (this directory, which spells the patterns out, excepted)."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        name
        for name in tracked
        if not name.startswith("tests/docs/")
        and (
            name.endswith(SCANNED_SUFFIXES)
            or Path(name).name in SCANNED_NAMES
            or name.startswith(SCANNED_DIRS)
        )
    ]


def test_no_file_speaks_of_work_sessions_issue_numbers_optimisation_numbers_or_people() -> None:
    offenders = []
    for name in scanned_files():
        text = (REPO_ROOT / name).read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if DIARY.search(line):
                offenders.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not offenders, "\n".join(offenders[:20])


def test_the_diary_check_reads_docs_code_and_the_changelog() -> None:
    scanned = set(scanned_files())
    assert {"CHANGELOG.md", "README.md", "docs/architecture.md", "scripts/bootstrap"} <= scanned
    for package in ("gateway_plugin/", "canonical/", "edge/", "workers/", "hdgctl/", "tests/"):
        assert any(n.startswith(package) and n.endswith(".py") for n in scanned), package


def test_the_diary_check_tells_the_work_from_the_product() -> None:
    # Spelled in two parts, so no file of the project reads like a diary, this one included.
    for diary in (
        "as agreed in the work " + "session",
        "fixed in " + "session 4",
        "see " + "issue 29",
        "(#" + "12)",
        "this closes " + "#7",
        "optimisation " + "3 halves it",
        "optimization " + "#2",
        "asked by the " + "coordinator",
        "another " + "engineer moved it",
    ):
        assert DIARY.search(diary), diary
    for product in (
        "the session of the lane",
        "step 2 of the upgrade",
        "--line: #353843;",
        '"message.delta#3@m1"',
        "Application Support #1 ?x=1",
        "the helpers below do",
    ):
        assert not DIARY.search(product), product
