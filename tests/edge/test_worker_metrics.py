"""edge.worker_metrics: every supervised worker's metrics in one scrape, labelled."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from edge import metrics
from edge.worker_metrics import STALE_S, WorkerSnapshots, merge

ONE = """# HELP hdg_edge_connections Authenticated device connections.
# TYPE hdg_edge_connections gauge
hdg_edge_connections{dialect="iris"} 3.0
hdg_edge_connections{dialect="pheby"} 1.0
# HELP hdg_edge_tenants Tenants with at least one device on this edge.
# TYPE hdg_edge_tenants gauge
hdg_edge_tenants 2.0
"""
TWO = ONE.replace(" 3.0", " 5.0").replace("tenants 2.0", "tenants 4.0")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What Prometheus' own parser reads: (name, labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_each_workers_series_carry_its_index_and_each_family_is_described_once() -> None:
    text = merge([("0", ONE), ("1", TWO)])
    assert text.count("# TYPE hdg_edge_connections gauge") == 1
    assert text.count("# HELP hdg_edge_tenants") == 1
    got = _samples(text)
    assert got[("hdg_edge_connections", (("dialect", "iris"), ("worker", "0")))] == 3.0
    assert got[("hdg_edge_connections", (("dialect", "iris"), ("worker", "1")))] == 5.0
    assert got[("hdg_edge_tenants", (("worker", "0"),))] == 2.0
    assert got[("hdg_edge_tenants", (("worker", "1"),))] == 4.0
    assert len(got) == 6


def test_a_label_value_with_spaces_and_braces_is_left_whole() -> None:
    text = '# HELP m A metric.\n# TYPE m counter\nm_total{code="a b {c}"} 1.0\n'
    got = _samples(merge([("2", text)]))
    assert got == {("m_total", (("code", "a b {c}"), ("worker", "2"))): 1.0}


def test_nothing_to_merge_is_an_empty_exposition() -> None:
    assert merge([]) == "" and merge([("0", "")]) == ""


def _snapshots(directory: Path, index: str, text: str) -> WorkerSnapshots:
    return WorkerSnapshots(directory, index, lambda: text.encode())


def test_a_scrape_answers_with_its_own_live_metrics_and_the_others_snapshots(
    tmp_path: Path,
) -> None:
    first, second = _snapshots(tmp_path, "0", ONE), _snapshots(tmp_path, "1", TWO)
    first.write()
    second.write()
    first.render = lambda: ONE.replace(" 3.0", " 7.0").encode()  # live, not its snapshot
    got = _samples(first.exposition().decode())
    assert got[("hdg_edge_connections", (("dialect", "iris"), ("worker", "0")))] == 7.0
    assert got[("hdg_edge_connections", (("dialect", "iris"), ("worker", "1")))] == 5.0
    assert not list(tmp_path.glob("*.tmp"))  # written whole, then moved into place


def test_a_worker_silent_for_too_long_is_left_out_and_a_removed_one_is_gone(
    tmp_path: Path,
) -> None:
    first, second = _snapshots(tmp_path, "0", ONE), _snapshots(tmp_path, "1", TWO)
    second.write()
    old = time.time() - STALE_S - 1
    os.utime(tmp_path / "worker-1.prom", (old, old))
    assert {labels for _, labels in _samples(first.exposition().decode())} == {
        (("dialect", "iris"), ("worker", "0")),
        (("dialect", "pheby"), ("worker", "0")),
        (("worker", "0"),),
    }
    second.write()
    second.remove()
    assert 'worker="1"' not in first.exposition().decode()


def test_two_workers_real_expositions_parse_as_one_with_each_family_once() -> None:
    text = metrics.render().decode()
    merged = merge([("0", text), ("1", text)])
    families = list(text_string_to_metric_families(merged))
    names = [family.name for family in families]
    assert len(names) == len(set(names))
    alone = sum(len(family.samples) for family in text_string_to_metric_families(text))
    assert sum(len(family.samples) for family in families) == 2 * alone


async def test_a_started_worker_keeps_a_snapshot_and_a_stopped_one_takes_it_away(
    tmp_path: Path,
) -> None:
    worker = _snapshots(tmp_path, "3", ONE)
    worker.start()
    for _ in range(200):
        if (tmp_path / "worker-3.prom").exists():
            break
        await asyncio.sleep(0.01)
    assert (tmp_path / "worker-3.prom").read_text() == ONE
    await worker.stop()
    assert not (tmp_path / "worker-3.prom").exists()
    assert not (tmp_path / "worker-3.prom.tmp").exists()
