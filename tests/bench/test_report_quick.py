"""``python -m bench.report --run --quick`` runs every bench script the performance page is
made from, end to end with the options the page depends on (both paths of our gateway,
both peers), and the page and its charts render from what that run wrote: a change that
breaks a bench or the report fails here, not in the next full run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import results
from bench.report import IMAGES, PAGE, QUICK, REPO, RESULTS, SET
from bench.report_table import BEGIN, END, SYSTEMS

# About two minutes; on a loaded machine longer, within each bench's own timeout.
pytestmark = pytest.mark.timeout(sum(b.timeout_s for b in QUICK) + 120)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    into = tmp_path_factory.mktemp("quick")
    before = {p: p.stat().st_mtime_ns for p in [*RESULTS.glob("*.json"), PAGE, *IMAGES.iterdir()]}
    done = subprocess.run(
        [sys.executable, "-m", "bench.report", "--run", "--quick", f"--into={into}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=sum(b.timeout_s for b in QUICK) + 60,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    after = {p: p.stat().st_mtime_ns for p in [*RESULTS.glob("*.json"), PAGE, *IMAGES.iterdir()]}
    assert after == before  # the committed results, page and charts were not touched
    return into


def test_the_quick_set_is_the_full_set_small() -> None:
    assert [b.result for b in QUICK] == [b.result for b in SET]
    for small, full in zip(QUICK, SET, strict=True):
        assert small.argv[0] == full.argv[0]
        options = {a.split("=")[0] for a in full.argv[1:]} - {"--levels", "--ladder"}
        assert options <= {a.split("=")[0] for a in small.argv[1:]}, small.result


def test_each_bench_of_the_set_writes_a_valid_result(quick_run: Path) -> None:
    for bench in QUICK:
        doc = results.load(quick_run / f"{bench.result}.json")
        assert results.validate(doc) == [], bench.result
        assert doc["figures"], bench.result


def test_both_paths_and_both_peers_are_measured_in_the_one_run(quick_run: Path) -> None:
    fanout = results.load(quick_run / "fanout.json")
    for system in SYSTEMS:
        for n, tenants in ((100, 1), (1000, 1), (100, 50)):
            rate = results.find(
                fanout, "max_sustained_rate", system=system, n=n, tenants=tenants, size=200
            )
            assert rate is not None and rate["value"] is not None, (system, n, tenants)
    for name, processes in (("connections", 1), ("connections-2-edges", 2)):
        doc = results.load(quick_run / f"{name}.json")
        assert doc["parameters"]["stock_switch_present"] is True
        for server in ("iris", "iris-stock"):
            for figure in ("setup_rate", "idle_memory_per_connection"):
                found = results.find(doc, figure, server=server, processes=processes)
                assert found is not None and found["value"] is not None, (name, server, figure)


def test_the_page_and_its_charts_render_from_the_quick_results(quick_run: Path) -> None:
    page = (quick_run / PAGE.name).read_text(encoding="utf-8")
    table = page.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    head = [cell.strip() for cell in rows[0].strip("|").split(" | ")]
    assert head[1:5] == [SYSTEMS[s] for s in ("ours", "ours-stock", "raw", "sio")]
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        assert cells[1] != "—" and cells[2] != "—", cells  # fast path and stock path
    charts = sorted(p.name for p in (quick_run / "perf").iterdir())
    assert charts == sorted(p.name for p in IMAGES.iterdir())
