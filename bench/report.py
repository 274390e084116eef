"""The performance page from committed result files, in one command.

    python -m bench.report          # charts (docs/images/perf/*.svg) and the figures table of
                                    # docs/performance.md, from bench/results/*.json only
    python -m bench.report --run    # first run the benchmarks that feed the page (loopback
                                    # only, ~10 minutes on 2 cores) and write those files
    python -m bench.report --check  # exit 1 if the page or a chart is not what the results give

Regenerating without new results rewrites identical files, so a change to the page's
figures is always a change to a result file first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PAGE = REPO / "docs" / "performance.md"
IMAGES = REPO / "docs" / "images" / "perf"
COMMANDS_BEGIN = "<!-- commands:begin -->"
COMMANDS_END = "<!-- commands:end -->"


@dataclass(frozen=True)
class Bench:
    """One benchmark of the set that feeds the page, and the most it may take."""

    result: str
    argv: tuple[str, ...]
    timeout_s: float


# Ladders: coarse enough that the whole set stays near 10 minutes on 2 cores, fine enough
# to tell the targets (0.8x raw, 3x socket.io) apart. 20,000/s, where latency is quoted,
# is a step of both.
FANOUT_LADDER = "10000,20000,40000,60000,80000,100000,120000,150000,200000,250000"
TENANTS_LADDER = "2000,4000,6000,8000,10000,12000,14000,16000,20000,24000,28000"
SET = (
    Bench(
        "fanout",
        (
            "bench/fanout.py",
            "--systems=ours,ours-stock,raw,sio",
            "--tenant-systems=ours,ours-stock,raw,sio",
            "--ns=10,100,1000",
            "--sizes=200",
            "--step-s=1.5",
            f"--ladder={FANOUT_LADDER}",
            f"--tenants-ladder={TENANTS_LADDER}",
            "--latency-load=20000",
        ),
        timeout_s=720,
    ),
    Bench("connections", ("bench/connections.py", "--levels=1000,5000"), timeout_s=300),
    Bench(
        "connections-2-edges",
        (
            "bench/connections.py",
            "--edge-workers=2",
            "--levels=1000,5000",
            "--no-raw",
        ),
        timeout_s=300,
    ),
)


def run_set(only: list[str]) -> int:
    """Run each bench of the set in turn (its own process group, stopped at its timeout);
    a failed bench leaves its committed result as it was. Returns how many failed."""
    failed = 0
    for bench in SET:
        if only and bench.result not in only:
            continue
        out = RESULTS / f"{bench.result}.json"
        argv = [sys.executable, *bench.argv, f"--out={out}"]
        print(f"== {bench.result}: {' '.join(bench.argv)} (load {os.getloadavg()[0]:.2f})")
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, start_new_session=True)
        try:
            code = proc.wait(timeout=bench.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the bench's own group: its servers and clients too
            proc.wait()
            code = -9
        print(f"== {bench.result}: exit {code} after {time.monotonic() - started:.0f} s")
        failed += code != 0
    return failed


def commands() -> str:
    """The set as shell commands, for the page (generated, so it cannot drift from SET)."""
    lines = []
    for bench in SET:
        args = [*bench.argv, f"--out=bench/results/{bench.result}.json"]
        lines.append(".venv/bin/python " + " \\\n    ".join(args))
    return "```\n" + "\n".join(lines) + "\n```\n"


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def regenerate(results: Path, page: Path, images: Path) -> list[Path]:
    """Charts, the page's table and its list of commands from ``results``; returns the
    files that changed."""
    # Here, not at the top: --run needs neither matplotlib nor the committed results.
    from bench.report_charts import render_charts
    from bench.report_table import BEGIN, END, Sources, render_table

    sources = Sources.load(results)
    changed = render_charts(sources, images)
    text = page.read_text(encoding="utf-8")
    new = _between(text, BEGIN, END, render_table(sources))
    new = _between(new, COMMANDS_BEGIN, COMMANDS_END, commands())
    if new != text:
        page.write_text(new, encoding="utf-8")
        changed.append(page)
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="store_true", help="run the benchmarks first")
    parser.add_argument(
        "--only", default="", help="with --run: these results only (comma list of names)"
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    options = parser.parse_args()
    failed = run_set([x for x in options.only.split(",") if x]) if options.run else 0
    if options.check:
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / PAGE.name
            shutil.copy(PAGE, page)
            images = Path(tmp) / "perf"
            shutil.copytree(IMAGES, images)
            changed = regenerate(RESULTS, page, images)
        for path in changed:
            print(f"out of date: {path.name}")
        sys.exit(1 if changed else 0)
    for path in regenerate(RESULTS, PAGE, IMAGES):
        print(f"rewrote {path.relative_to(REPO)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
