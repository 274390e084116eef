"""The performance page is made from the committed result files: regenerating it changes
nothing, every number in its table is a figure of a result file, and the files follow the
one result schema."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import results
from bench.report import (
    COMMANDS_BEGIN,
    COMMANDS_END,
    IMAGES,
    PAGE,
    REPO,
    RESULTS,
    regenerate,
    stale,
)
from bench.report_table import BEGIN, END, Sources, quote, render_table

COMMITTED = sorted(RESULTS.glob("*.json"))


def table_rows() -> list[list[str]]:
    section = PAGE.read_text(encoding="utf-8").split(BEGIN, 1)[1].split(END, 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def test_the_docs_are_generated_from_committed_results() -> None:
    assert {p.stem for p in COMMITTED} >= {"fanout", "connections", "connections-2-edges"}


def test_regenerating_from_the_committed_results_changes_no_byte(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    shutil.copy(PAGE, page)
    images = tmp_path / "perf"
    shutil.copytree(IMAGES, images)
    assert regenerate(RESULTS, page, images) == []
    assert page.read_bytes() == PAGE.read_bytes()
    assert sorted(p.name for p in images.iterdir()) == sorted(p.name for p in IMAGES.iterdir())


def test_charts_drawn_from_nothing_are_the_committed_ones(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_text(f"{BEGIN}\n{END}\n{COMMANDS_BEGIN}\n{COMMANDS_END}\n", encoding="utf-8")
    images = tmp_path / "perf"
    regenerate(RESULTS, page, images)
    for chart in IMAGES.iterdir():
        assert (images / chart.name).read_bytes() == chart.read_bytes(), chart.name


def test_every_number_in_the_table_is_a_figure_of_a_result_file() -> None:
    quoted = {quote(f) for path in COMMITTED for f in results.load(path)["figures"]}
    rows = table_rows()
    assert len(rows) >= 6
    seen = 0
    for row in rows:
        for cell in row[1:-2]:  # the systems' columns: values, or "p50 / p99"
            for value in cell.split(" / "):
                if value != "—":
                    assert value in quoted, (row[0], value)
                    seen += 1
        for ratio in re.findall(r"\(((?:> )?[0-9.]+×)", row[-1]):  # "yes (0.83× raw websockets)"
            assert ratio in quoted, (row[0], ratio)
            seen += 1
    assert seen >= 10


def test_the_page_shows_every_chart_by_a_relative_path() -> None:
    text = PAGE.read_text(encoding="utf-8")
    charts = sorted(p.name for p in IMAGES.glob("*.svg"))
    assert len(charts) == 4
    for name in charts:
        assert f"](images/perf/{name})" in text


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_each_committed_result_records_its_machine_load_and_commit(path: Path) -> None:
    doc = results.load(path)
    assert doc["git"]["commit"] and re.fullmatch(r"[0-9a-f]{40}", doc["git"]["commit"])
    assert len(doc["machine"]["loadavg_start"]) == 3
    assert doc["machine"]["versions"]["uvicorn"] and doc["machine"]["cores"]
    assert all(f["unit"] for f in doc["figures"])


def fanout(*, switch: bool) -> results.Json:
    doc = results.document(
        results.begin(),
        bench="fanout",
        parameters={
            "systems": ["ours", "ours-stock", "raw", "sio"],
            "stock_switch_present": switch,
        },
        figures=[
            results.figure("max_sustained_rate", 100_000, "deliveries/s", system="ours", n=100),
            results.figure("max_sustained_rate", 90_000, "deliveries/s", system="raw", n=100),
        ],
    )
    return doc


def test_the_stock_stack_is_shown_only_when_the_code_measured_had_its_switch() -> None:
    assert Sources({"fanout": fanout(switch=False)}).systems() == ["ours", "raw", "sio"]
    assert Sources({"fanout": fanout(switch=True)}).systems() == [
        "ours",
        "ours-stock",
        "raw",
        "sio",
    ]


def test_a_rate_at_either_end_of_the_ladder_is_quoted_as_a_bound() -> None:
    top = results.figure("max_sustained_rate", 250_000, "deliveries/s", at_ladder_top=True)
    assert quote(top) == "≥ 250,000"
    none = results.figure("max_sustained_rate", 0, "deliveries/s", ladder_bottom=10_000)
    assert quote(none) == "< 10,000"
    assert quote(results.figure("rate_ratio", 0.834, "x")) == "0.83×"
    assert quote(results.figure("rate_ratio", 6, "x", lower_bound=True)) == "> 6.00×"
    assert quote(results.figure("latency", None, "ms")) == "—"


def test_a_figure_is_found_by_a_subset_of_its_labels_and_never_ambiguously() -> None:
    doc = fanout(switch=False)
    found = results.find(doc, "max_sustained_rate", system="raw")
    assert found is not None and found["value"] == 90_000
    assert results.find(doc, "max_sustained_rate", system="sio") is None
    with pytest.raises(LookupError):
        results.find(doc, "max_sustained_rate", n=100)


def test_a_result_without_its_machine_or_with_a_bare_figure_is_refused() -> None:
    doc = fanout(switch=False)
    assert results.validate(doc) == []
    assert results.validate({k: v for k, v in doc.items() if k != "machine"}) == ["missing machine"]
    doc["figures"].append({"name": "rate", "value": 1})
    assert results.validate(doc) == ["figures[2] keys ['name', 'value']"]


def test_check_names_the_page_and_each_chart_the_results_no_longer_give(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    text = PAGE.read_text(encoding="utf-8")
    row = next(line for line in table_lines(text) if "1 user × 100 devices" in line)
    page.write_text(text.replace(row, row.replace(" | ", " | 1", 1)), encoding="utf-8")
    images = tmp_path / "perf"
    shutil.copytree(IMAGES, images)
    (images / "latency.svg").unlink()
    assert sorted(stale(RESULTS, page, images)) == ["latency.svg", "performance.md"]
    assert page.read_text(encoding="utf-8") != text  # --check writes nothing
    assert stale() == []


def test_the_check_command_passes_on_the_committed_page() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.report", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (0, "")


def table_lines(text: str) -> list[str]:
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ")]


def connections(*, switch: bool) -> results.Json:
    return results.document(
        results.begin(),
        bench="connections",
        parameters={"stock_switch_present": switch},
        figures=[
            results.figure(name, value, unit, server=server, devices=5000, processes=1)
            for server, kib in (("iris", 16.3), ("iris-stock", 23.7), ("raw", 14.5))
            for name, value, unit in (
                ("setup_rate", 2000, "set-ups/s"),
                ("idle_memory_per_connection", kib, "KiB"),
            )
        ],
    )


def memory_row(src: Sources) -> list[str]:
    rows = [line for line in render_table(src).splitlines() if line.startswith("| idle memory")]
    return [cell.strip() for cell in rows[0].strip("|").split(" | ")]


def test_the_stock_paths_memory_is_shown_beside_the_fast_paths_when_it_was_measured() -> None:
    shown = memory_row(
        Sources({"fanout": fanout(switch=True), "connections": connections(switch=True)})
    )
    assert shown[1:6] == ["16.3", "23.7", "14.5", "—", "≤ 20 KiB"]
    assert shown[6] == "yes"  # the target is the fast path's
    without = memory_row(
        Sources({"fanout": fanout(switch=True), "connections": connections(switch=False)})
    )
    assert without[1:5] == ["16.3", "—", "14.5", "—"]
