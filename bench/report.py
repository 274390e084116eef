"""The performance page from committed result files, in one command.

    python -m bench.report          # charts (docs/images/perf/*.svg) and the figures table of
                                    # docs/performance.md, from bench/results/*.json only
    python -m bench.report --run    # first run the benchmarks that feed the page (loopback
                                    # only, ~10 minutes on 2 cores) and write those files
    python -m bench.report --check  # exit 1 if the page or a chart is not what the results give
    python -m bench.report --run --quick [--into DIR]
                                    # a smoke run of the whole set (small ladders and levels,
                                    # ~2 minutes) into DIR (else a new temporary directory),
                                    # and the page and charts rendered from it there

Regenerating without new results rewrites identical files, so a change to the page's
figures is always a change to a result file first. A quick run never touches
``bench/results/`` or ``docs/``: its figures are too coarse to publish.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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
    Bench("connections", ("bench/connections.py", "--levels=1000,5000", "--stock"), timeout_s=360),
    Bench(
        "connections-2-edges",
        (
            "bench/connections.py",
            "--edge-workers=2",
            "--levels=1000,5000",
            "--no-raw",
            "--stock",
        ),
        timeout_s=360,
    ),
)
# The same set, small: every script and option the page depends on, run end to end in
# about two minutes (one ladder step per case, a few hundred devices, short settles).
QUICK = (
    Bench(
        "fanout",
        (
            "bench/fanout.py",
            "--systems=ours,ours-stock,raw,sio",
            "--tenant-systems=ours,ours-stock,raw,sio",
            "--ns=100,1000",
            "--sizes=200",
            "--step-s=0.5",
            "--ladder=5000",
            "--tenants-ladder=2000",
            "--tenant-users=50",
            "--latency-load=5000",
        ),
        timeout_s=300,
    ),
    Bench(
        "connections",
        ("bench/connections.py", "--quick", "--levels=200", "--stock"),
        timeout_s=180,
    ),
    Bench(
        "connections-2-edges",
        (
            "bench/connections.py",
            "--quick",
            "--edge-workers=2",
            "--levels=200",
            "--no-raw",
            "--stock",
        ),
        timeout_s=180,
    ),
)


def run_set(only: list[str], benches: tuple[Bench, ...] = SET, into: Path = RESULTS) -> int:
    """Run each bench of ``benches`` in turn (its own process group, stopped at its timeout),
    writing ``<into>/<result>.json``; a failed bench leaves the file it would have written
    as it was. Returns how many failed."""
    failed = 0
    for bench in benches:
        if only and bench.result not in only:
            continue
        out = into / f"{bench.result}.json"
        argv = [sys.executable, *bench.argv, f"--out={out}"]
        print(f"== {bench.result}: {' '.join(bench.argv)} (load {os.getloadavg()[0]:.2f})")
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, start_new_session=True)
        try:
            code = proc.wait(timeout=bench.timeout_s)
        except subprocess.TimeoutExpired:
            code = stop_bench(proc)
            print(f"== {bench.result}: timed out after {bench.timeout_s:.0f} s")
        print(f"== {bench.result}: exit {code} after {time.monotonic() - started:.0f} s")
        failed += code != 0
    return failed


def stop_bench(proc: subprocess.Popen[bytes]) -> int:
    """Stop a bench past its timeout. SIGINT first: its ``finally`` blocks and exit hooks
    stop what it started in sessions of their own (edges, redis-server, peers, child
    roles), which a signal to its process group would not reach; then SIGKILL to its group
    if it is still there after a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return -signal.SIGINT


def commands(benches: tuple[Bench, ...] = SET) -> str:
    """The set as shell commands, for the page (generated, so it cannot drift from SET)."""
    lines = []
    for bench in benches:
        args = [*bench.argv, f"--out=bench/results/{bench.result}.json"]
        lines.append(".venv/bin/python " + " \\\n    ".join(args))
    return "```\n" + "\n".join(lines) + "\n```\n"


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def regenerate(
    results: Path, page: Path, images: Path, benches: tuple[Bench, ...] = SET
) -> list[Path]:
    """Charts, the page's table and its list of commands from ``results``; returns the
    files that changed."""
    # Here, not at the top: --run needs neither matplotlib nor the committed results.
    from bench.report_charts import render_charts
    from bench.report_table import BEGIN, END, Sources, render_table

    sources = Sources.load(results)
    changed = render_charts(sources, images)
    text = page.read_text(encoding="utf-8")
    new = _between(text, BEGIN, END, render_table(sources))
    new = _between(new, COMMANDS_BEGIN, COMMANDS_END, commands(benches))
    if new != text:
        page.write_text(new, encoding="utf-8")
        changed.append(page)
    return changed


def stale(results: Path = RESULTS, page: Path = PAGE, images: Path = IMAGES) -> list[str]:
    """The names of the page and charts that regenerating from ``results`` would change
    (``--check``); nothing is written."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / page.name
        shutil.copy(page, copy)
        charts = Path(tmp) / "perf"
        shutil.copytree(images, charts)
        return [path.name for path in regenerate(results, copy, charts)]


def quick(into: Path) -> int:
    """The quick set into ``into``, then the page and charts rendered from it there
    (``into/performance.md``, ``into/perf/``). Returns how many benches failed."""
    into.mkdir(parents=True, exist_ok=True)
    failed = run_set([], QUICK, into)
    page = into / PAGE.name
    shutil.copy(PAGE, page)
    regenerate(into, page, into / "perf", QUICK)
    print(f"quick run: results, page and charts in {into}")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="store_true", help="run the benchmarks first")
    parser.add_argument(
        "--only", default="", help="with --run: these results only (comma list of names)"
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="with --run: the small set, into --into (never bench/results/ or docs/)",
    )
    parser.add_argument("--into", type=Path, help="with --quick: the directory to write to")
    options = parser.parse_args()
    if options.quick or options.into:
        if not options.run or options.check or options.only or not options.quick:
            parser.error("--quick goes with --run only (and --into with --quick)")
        into = options.into or Path(tempfile.mkdtemp(prefix="hdg-bench-quick-"))
        sys.exit(1 if quick(into) else 0)
    failed = run_set([x for x in options.only.split(",") if x]) if options.run else 0
    if options.check:
        changed = stale()
        for name in changed:
            print(f"out of date: {name}")
        sys.exit(1 if changed else 0)
    for path in regenerate(RESULTS, PAGE, IMAGES):
        print(f"rewrote {path.relative_to(REPO)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
