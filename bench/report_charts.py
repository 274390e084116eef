"""The performance page's charts (SVG, ``docs/images/perf/``) from result files only.

Deterministic: matplotlib's default style whatever the local rc, a fixed ``svg.hashsalt``
for element ids, text kept as text (no font outlines), and no date or tool in the
metadata, so the same results give the same bytes."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt

from bench.report_table import FANOUT, LATENCY_N, MEMORY, SETUP, SYSTEMS, Sources

RC = {
    "svg.hashsalt": "hermes-device-gateway-perf",
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.axisbelow": True,
}
METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
COLOURS = {"ours": "#1b6ac9", "ours-stock": "#7fb0ea", "raw": "#555555", "sio": "#d1772b"}
TARGET = {"color": "#b00020", "linestyle": "--", "linewidth": 1}
SERVERS = {
    "iris": "ours, iris hello",
    "iris-stock": "stock path, iris hello",
    "pheby": "ours, pheby hello",
    "uvicorn-floor": "uvicorn floor (bare app)",
    "raw": "raw websockets",
}
SERVER_COLOURS = {
    "iris": COLOURS["ours"],
    "pheby": COLOURS["ours"],
    "iris-stock": COLOURS["ours-stock"],
}
Axes = Any


def _svg(draw: Callable[[Any], None], size: tuple[float, float]) -> bytes:
    with plt.style.context("default"), matplotlib.rc_context(RC):
        fig = plt.figure(figsize=size)
        try:
            draw(fig)
            fig.tight_layout()
            out = io.BytesIO()
            fig.savefig(out, format="svg", metadata=METADATA)
        finally:
            plt.close(fig)
    return out.getvalue()


def _fanout(src: Sources) -> Callable[[Any], None]:
    def draw(fig: Any) -> None:
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
        ns = src.docs[FANOUT]["parameters"]["ns"]
        for system in src.systems():
            points = [
                (n, src.value(FANOUT, "max_sustained_rate", system=system, n=n, tenants=1))
                for n in ns
            ]
            points = [(n, v) for n, v in points if v is not None]
            left.plot(
                [n for n, _ in points],
                [v / 1000 for _, v in points],
                marker="o",
                color=COLOURS[system],
                label=SYSTEMS[system],
            )
        left.set_xscale("log")
        left.set_xticks(ns, [f"{n:,}" for n in ns])
        left.set_xlabel("devices of one user (N)")
        left.set_ylabel("deliveries/s sustained (thousands)")
        left.set_title("one user, N devices")
        left.set_ylim(bottom=0)
        left.legend(frameon=False)
        systems = src.systems()
        users = src.tenant_users()
        rates = [
            src.value(FANOUT, "max_sustained_rate", system=s, n=2 * users, tenants=users) or 0
            for s in systems
        ]
        bars = right.bar(
            [SYSTEMS[s] for s in systems],
            [r / 1000 for r in rates],
            color=[COLOURS[s] for s in systems],
        )
        right.bar_label(bars, fmt="{:,.0f}")
        right.set_ylim(top=max([r / 1000 for r in rates] + [1]) * 1.15)  # room for labels
        right.set_title(f"{users:,} users × 2 devices")
        right.set_ylabel("deliveries/s sustained (thousands)")
        right.tick_params(axis="x", labelrotation=20)

    return draw


def _latency(src: Sources) -> Callable[[Any], None]:
    load = src.docs[FANOUT]["parameters"]["latency_load_deliveries_per_s"]

    def draw(fig: Any) -> None:
        ax = fig.subplots()
        systems = src.systems()
        width = 0.8 / len(systems)
        quantiles = (50, 90, 99)
        for i, system in enumerate(systems):
            values = [
                src.value(
                    FANOUT,
                    "latency",
                    system=system,
                    n=LATENCY_N,
                    tenants=1,
                    load=load,
                    percentile=q,
                )
                or 0
                for q in quantiles
            ]
            ax.bar(
                [x + (i - (len(systems) - 1) / 2) * width for x in range(len(quantiles))],
                values,
                width,
                color=COLOURS[system],
                label=SYSTEMS[system],
            )
        ax.set_xticks(range(len(quantiles)), [f"p{q}" for q in quantiles])
        ax.set_ylabel("publish → device (ms)")
        ax.set_title(f"latency, {LATENCY_N} devices of one user at {load:,} deliveries/s")
        ax.legend(frameon=False)

    return draw


def _per_server(
    src: Sources, doc: str, name: str, unit: str, target: float, title: str
) -> Callable[[Any], None]:
    def draw(fig: Any) -> None:
        ax = fig.subplots()
        labels, values, colours = [], [], []
        for server, label in SERVERS.items():
            if server == "iris-stock" and not src.stock_measured(doc):
                continue  # the code measured had no switch: the fast path again
            level = src.largest_level(doc, server)
            value = src.value(doc, name, server=server, devices=level)
            if value is not None:
                labels.append(f"{label}\n({level:,} devices)")
                values.append(value)
                colours.append(SERVER_COLOURS.get(server, "#888888"))
        bars = ax.barh(labels[::-1], values[::-1], color=colours[::-1])
        ax.bar_label(bars, fmt="{:,.1f}" if unit == "KiB" else "{:,.0f}", padding=2)
        ax.axvline(target, **TARGET)
        ax.set_xlim(right=max([*values, target]) * 1.18)  # room for the bars' labels
        ax.set_xlabel(unit)
        ax.set_title(f"{title} (target {target:,g}, dashed)")

    return draw


def charts(src: Sources) -> dict[str, bytes]:
    """Every chart the results allow, by file name."""
    out: dict[str, bytes] = {}
    if FANOUT in src.docs:
        out["fanout-rate.svg"] = _svg(_fanout(src), (9, 3.6))
        out["latency.svg"] = _svg(_latency(src), (6.5, 3.2))
    if MEMORY in src.docs:
        out["idle-memory.svg"] = _svg(
            _per_server(
                src,
                MEMORY,
                "idle_memory_per_connection",
                "KiB",
                20,
                "idle memory per connection",
            ),
            (6.5, 2.8),
        )
    if SETUP in src.docs:
        out["setup-rate.svg"] = _svg(
            _per_server(
                src,
                SETUP,
                "setup_rate",
                "set-ups/s",
                3000,
                "set-up incl. hello, two processes",
            ),
            (6.5, 2.6),
        )
    return out


def render_charts(src: Sources, folder: Path) -> list[Path]:
    """Write the charts that differ from what ``folder`` holds; returns those paths."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, data in charts(src).items():
        path = folder / name
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            changed.append(path)
    return changed
