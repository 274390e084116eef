"""The fan-out benchmark's summaries: ours against each peer, case by case (``ratios``),
the figures its result file quotes (``fanout_figures``), and the hottest functions of a
py-spy profile (``top_frames``)."""

from __future__ import annotations

from pathlib import Path

from bench.host import Json
from bench.results import figure


def top_frames(collapsed: Path, limit: int = 25) -> list[tuple[str, float, float]]:
    """(function, self %, total %) from py-spy's collapsed stacks."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    samples = 0
    for line in collapsed.read_text(encoding="utf-8").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + count
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:limit]
    return [
        (f, round(100 * c / max(samples, 1), 1), round(100 * total[f] / max(samples, 1), 1))
        for f, c in ranked
    ]


def ratios(results: list[Json]) -> list[Json]:
    table: list[Json] = []
    index = {(r["system"], r["tenants"], r["n"], r["size"]): r for r in results if "n" in r}
    for (system, tenants, n, size), r in sorted(index.items()):
        if system not in ("ours", "ours-stock"):
            continue
        row: Json = {
            "system": system,
            "tenants": tenants,
            "case": f"{tenants} tenant(s)" if tenants > 1 else "1 user",
            "n": n,
            "size": size,
            "ours_deliveries_per_s": r["max_sustained_deliveries_per_s"],
            "ours_server_cpu_us": (r["at_max"] or {}).get("server_cpu_us_per_delivery"),
            "ours_server_side_cpu_us": (r["at_max"] or {}).get("server_side_cpu_us_per_delivery"),
        }
        for peer in ("raw", "sio"):
            other = index.get((peer, tenants, n, size))
            if other is None:
                continue
            theirs = other["max_sustained_deliveries_per_s"]
            row[f"{peer}_deliveries_per_s"] = theirs
            row[f"ratio_vs_{peer}"] = (
                round(r["max_sustained_deliveries_per_s"] / theirs, 2) if theirs else None
            )
            row[f"{peer}_server_cpu_us"] = (other["at_max"] or {}).get("server_cpu_us_per_delivery")
            # CPU per delivery at the highest rate both sustained (same load, fairer).
            common = min(r["max_sustained_deliveries_per_s"], theirs)
            mine = next(
                (s for s in r["steps"] if s["target_deliveries_per_s"] == common and s["pass"]),
                None,
            )
            peer_step = next(
                (s for s in other["steps"] if s["target_deliveries_per_s"] == common and s["pass"]),
                None,
            )
            if mine and peer_step:
                row[f"cpu_ratio_vs_{peer}_at_{common}"] = round(
                    mine["server_cpu_us_per_delivery"]
                    / max(peer_step["server_cpu_us_per_delivery"], 1e-9),
                    2,
                )
        table.append(row)
    return table


def fanout_figures(
    results: list[Json],
    table: list[Json],
    ladder: list[int],
    tenants_ladder: list[int],
    latency_load: int,
) -> list[Json]:
    """The quotable figures: each case's highest sustained rate (``at_ladder_top``: the
    ladder ended first, so it is a lower bound; 0: not even ``ladder_bottom`` passed), ours
    over each peer, and the latency percentiles of each case's step at ``latency_load``
    deliveries/s, pass or not."""
    out: list[Json] = []
    for r in results:
        if "n" not in r:
            continue
        case = {"system": r["system"], "n": r["n"], "tenants": r["tenants"], "size": r["size"]}
        steps = tenants_ladder if r["tenants"] > 1 else ladder
        best = r["max_sustained_deliveries_per_s"]
        out.append(
            figure(
                "max_sustained_rate",
                best,
                "deliveries/s",
                **case,
                at_ladder_top=best == steps[-1],
                ladder_bottom=steps[0],
            )
        )
        step = next((s for s in r["steps"] if s["target_deliveries_per_s"] == latency_load), None)
        if step is not None and step["client"]["latency"].get("n"):
            for q in (50, 90, 99):
                out.append(
                    figure(
                        "latency",
                        step["client"]["latency"][f"p{q}_ms"],
                        "ms",
                        **case,
                        load=latency_load,
                        percentile=q,
                    )
                )
    for row in table:
        bottom = (tenants_ladder if row["tenants"] > 1 else ladder)[0]
        for peer in ("raw", "sio"):
            if f"ratio_vs_{peer}" not in row:
                continue
            ratio, lower_bound = row[f"ratio_vs_{peer}"], False
            if ratio is None and row["ours_deliveries_per_s"]:
                # The peer passed no step: it is below the ladder's first, so ours is more
                # than ours / first step times it.
                ratio, lower_bound = round(row["ours_deliveries_per_s"] / bottom, 2), True
            out.append(
                figure(
                    "rate_ratio",
                    ratio,
                    "x",
                    system=row["system"],
                    peer=peer,
                    n=row["n"],
                    tenants=row["tenants"],
                    size=row["size"],
                    lower_bound=lower_bound,
                )
            )
    return out


def compact(results: list[Json]) -> list[Json]:
    """The sweeps as the result file keeps them: per step what decided pass or fail, the
    servers' CPU per delivery and what the rest of the machine used meanwhile (the full
    step records run to ~1 KB each)."""
    out: list[Json] = []
    for r in results:
        if "steps" not in r:
            out.append(r)
            continue
        steps = [
            {
                "target_deliveries_per_s": s["target_deliveries_per_s"],
                "achieved_deliveries_per_s": s["achieved_deliveries_per_s"],
                "producer_rate_ratio": round(
                    s["producer"]["achieved_rate"] / max(s["events_per_s"], 1e-9), 3
                ),
                "latency": s["client"]["latency"],
                "missing": s["client"]["missing"],
                "server_cpu_us_per_delivery": s["server_cpu_us_per_delivery"],
                "other_cpu_s": s["cpu"]["other_cpu_s"],
                "pass": s["pass"],
                "why_not": s["why_not"],
                **({"retry": s["retry"]} if "retry" in s else {}),
            }
            for s in r["steps"]
        ]
        out.append({k: v for k, v in r.items() if k not in ("steps", "at_max")} | {"steps": steps})
    return out
