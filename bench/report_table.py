"""The performance page's generated part: the run it reports (machine, versions, load,
commit) and the figures table, from result files only (``bench.results``).

Every number in a system column is ``quote(figure)`` of a figure of a result file, so the
page can be checked against the files (tests/bench/test_report.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import Json, find, load

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
FANOUT = "fanout"
MEMORY = "connections"
SETUP = "connections-2-edges"
LATENCY_N = 100
SYSTEMS = {
    "ours": "ours, fast path",
    "ours-stock": "ours, stock path",
    "raw": "raw websockets",
    "sio": "python-socketio",
}
# The connections bench's server for each system: idle memory and set-up rate.
SERVER_OF = {"ours": "iris", "ours-stock": "iris-stock", "raw": "raw"}


@dataclass(frozen=True)
class Sources:
    """The committed result files, by name (``bench/results/<name>.json``)."""

    docs: dict[str, Json]

    @classmethod
    def load(cls, folder: Path) -> Sources:
        return cls({path.stem: load(path) for path in sorted(folder.glob("*.json"))})

    def get(self, doc: str, name: str, **labels: Any) -> Json | None:
        return find(self.docs[doc], name, **labels) if doc in self.docs else None

    def value(self, doc: str, name: str, **labels: Any) -> Any:
        fig = self.get(doc, name, **labels)
        return None if fig is None else fig["value"]

    def systems(self) -> list[str]:
        """The fan-out systems to show: ``ours-stock`` only when the code measured had the
        switch (without it, that run measured the fast path a second time)."""
        params = self.docs[FANOUT]["parameters"] if FANOUT in self.docs else {}
        shown = [s for s in SYSTEMS if s in params.get("systems", [])]
        if not params.get("stock_switch_present"):
            shown = [s for s in shown if s != "ours-stock"]
        return shown

    def tenant_users(self) -> int:
        """The users of the fan-out's many-users case (2 devices each; 500 unless the run
        said otherwise)."""
        params = self.docs[FANOUT]["parameters"] if FANOUT in self.docs else {}
        return int(params.get("tenant_users", 500))

    def stock_measured(self, doc: str) -> bool:
        """Whether ``doc`` holds stock-path figures of code that had the switch."""
        return bool(self.docs.get(doc, {}).get("parameters", {}).get("stock_switch_present"))

    def largest_level(self, doc: str, server: str) -> int | None:
        levels = [
            f["labels"]["devices"]
            for f in self.docs.get(doc, {}).get("figures", [])
            if f["name"] == "setup_rate" and f["labels"]["server"] == server
        ]
        return max(levels) if levels else None


def quote(fig: Json | None) -> str:
    """How a figure appears on the page (also what the test matches numbers against)."""
    if fig is None or fig["value"] is None:
        return "—"
    value, unit = fig["value"], fig["unit"]
    if unit in ("deliveries/s", "set-ups/s"):
        if value == 0 and "ladder_bottom" in fig["labels"]:
            return f"< {fig['labels']['ladder_bottom']:,}"  # not even the first step passed
        text = f"{round(value):,}"
        return f"≥ {text}" if fig["labels"].get("at_ladder_top") else text
    if unit == "x":
        return f"{'> ' if fig['labels'].get('lower_bound') else ''}{value:.2f}×"
    if unit == "KiB":
        return f"{value:.1f}"
    return f"{value:.2f}"


def _met(ok: bool | None) -> str:
    return "—" if ok is None else ("yes" if ok else "no")


def _ratio_row(src: Sources, n: int, tenants: int, peer: str, floor: float) -> tuple[str, str]:
    """(``met`` cell, the ratio quoted) of ours against ``peer`` in one case."""
    fig = src.get(FANOUT, "rate_ratio", system="ours", peer=peer, n=n, tenants=tenants)
    if fig is None or fig["value"] is None:
        return "—", ""
    return _met(fig["value"] >= floor), f" ({quote(fig)} {SYSTEMS[peer]})"


def _rate_cells(src: Sources, systems: list[str], n: int, tenants: int) -> list[str]:
    return [
        quote(src.get(FANOUT, "max_sustained_rate", system=s, n=n, tenants=tenants, size=200))
        for s in systems
    ]


def _latency_cells(src: Sources, systems: list[str], load: int) -> list[str]:
    def one(system: str, q: int) -> str:
        return quote(
            src.get(
                FANOUT, "latency", system=system, n=LATENCY_N, tenants=1, load=load, percentile=q
            )
        )

    return [f"{one(s, 50)} / {one(s, 99)}" for s in systems]


def render_table(src: Sources) -> str:
    systems = src.systems()
    head = ["figure", *(SYSTEMS[s] for s in systems), "target (fast path)", "met"]
    rows: list[list[str]] = []
    for n, tenants, label in (
        (100, 1, "1 user × 100 devices"),
        (1000, 1, "1 user × 1,000 devices"),
    ):
        met, ratio = _ratio_row(src, n, tenants, "raw", 0.8)
        rows.append(
            [f"fan-out, {label} (deliveries/s)", *_rate_cells(src, systems, n, tenants)]
            + ["≥ 0.8× raw websockets", met + ratio]
        )
    users = src.tenant_users()
    met, ratio = _ratio_row(src, 2 * users, users, "sio", 3.0)
    rows.append(
        [f"fan-out, {users:,} users × 2 devices (deliveries/s)"]
        + _rate_cells(src, systems, 2 * users, users)
        + ["≥ 3× python-socketio", met + ratio]
    )
    load = (src.docs.get(FANOUT, {}).get("parameters") or {}).get("latency_load_deliveries_per_s")
    rows.append(
        [
            f"latency publish → device, p50 / p99 (ms), {LATENCY_N} devices at {load:,} "
            "deliveries/s"
            if load
            else "latency publish → device, p50 / p99 (ms)",
            *_latency_cells(src, systems, load or 0),
            "p99 ≤ 50 ms",
            _met(_latency_ok(src, load)),
        ]
    )
    memory = _per_server(src, MEMORY, "idle_memory_per_connection", systems)
    ours_kib = (memory["ours"] or {}).get("value")
    level = src.largest_level(MEMORY, "iris")
    rows.append(
        [f"idle memory per connection (KiB), {level or 0:,} devices on one edge"]
        + [quote(memory[s]) for s in systems]
        + ["≤ 20 KiB", _met(None if ours_kib is None else ours_kib <= 20)]
    )
    setup = _per_server(src, SETUP, "setup_rate", systems, processes=2)
    rate = (setup["ours"] or {}).get("value")
    rows.append(
        ["connection set-up incl. `hello` (set-ups/s), two edge processes"]
        + [quote(setup[s]) for s in systems]
        + ["≥ 3,000/s", _met(None if rate is None else rate >= 3000)]
    )
    lines = [_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)]
    return _run_facts(src) + "\n" + "\n".join(lines) + "\n"


def _per_server(
    src: Sources, doc: str, name: str, systems: list[str], **labels: Any
) -> dict[str, Json | None]:
    """Each system's figure of a connections result at its largest level (None: not
    measured there; the stock path only by code that had the switch)."""
    out: dict[str, Json | None] = {}
    for system in systems:
        server = SERVER_OF.get(system)
        if server is None or (system == "ours-stock" and not src.stock_measured(doc)):
            out[system] = None
            continue
        level = src.largest_level(doc, server)
        out[system] = src.get(doc, name, server=server, devices=level, **labels)
    return out


def _latency_ok(src: Sources, load: int | None) -> bool | None:
    if not load:
        return None
    p99 = src.value(
        FANOUT, "latency", system="ours", n=LATENCY_N, tenants=1, load=load, percentile=99
    )
    return None if p99 is None else p99 <= 50


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _run_facts(src: Sources) -> str:
    """Where and when the figures below were measured, from the files themselves."""
    lines = []
    for name in (FANOUT, MEMORY, SETUP):
        doc = src.docs.get(name)
        if doc is None:
            lines.append(f"- `bench/results/{name}.json`: not run yet")
            continue
        load = doc["machine"]["loadavg_start"]
        commit = (doc["git"]["commit"] or "?")[:10] + (" (modified)" if doc["git"]["dirty"] else "")
        lines.append(
            f"- `bench/results/{name}.json`: {doc['timestamp']}, commit {commit}, "
            f"{doc['wall_s']:.0f} s, load average at start {load[0]:.2f}"
            if load
            else f"- `bench/results/{name}.json`: {doc['timestamp']}, commit {commit}"
        )
    machine = next(iter(src.docs.values()), {}).get("machine")
    if machine:
        v = machine["versions"]
        lines.insert(
            0,
            f"- Machine: {machine['cpu_model']}, {machine['cores']} cores, "
            f"{machine['mem_gib']} GiB; Linux {machine['kernel']}; CPython {machine['python']}; "
            f"uvicorn {v.get('uvicorn')}, websockets {v.get('websockets')}, redis-py "
            f"{v.get('redis')}, redis-server {v.get('redis-server')}, Hermes Agent "
            f"{v.get('hermes')}, python-socketio {v.get('python-socketio')}",
        )
    return "\n".join(lines) + "\n"
