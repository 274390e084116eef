"""The fan-out benchmark's summaries: ours against each peer, case by case (``ratios``),
and the hottest functions of a py-spy profile (``top_frames``)."""

from __future__ import annotations

from pathlib import Path

from bench.host import Json


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
        if system != "ours":
            continue
        row: Json = {
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
