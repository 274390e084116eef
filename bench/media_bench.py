"""Benchmark the media transcoders: wall time, CPU time and peak memory per file.

    .venv/bin/python bench/media_bench.py [--repeat 3]

Cases: a 12 MP JPEG (EXIF orientation 6, sensor-like noise) -> WebP thumbnail; 60 s of
stereo 44.1 kHz FLAC -> Opus/Ogg; 30 s of 1080p30 H.264 -> poster + 10 s 360p preview.
The samples are generated first (timed separately). Each run happens in a fresh
subprocess so memory figures are not polluted by earlier runs:

* ``ru_maxrss_delta_mib``: ``ru_maxrss`` after the transcode minus before it (imports
  done). The samples are generated in another subprocess, so the bench's own process
  stays small and the child does not inherit a high-water mark above its own;
* ``hwm_delta_mib``: the same from ``/proc/self/status`` (``VmHWM`` reset through
  ``clear_refs`` just before the transcode, minus ``VmRSS`` then) -- native buffers of
  FFmpeg/Pillow/libx264 included, page-accurate;
* ``tracemalloc_peak_mib``: peak of Python-level allocations during the transcode;
* ``job_median_seconds``: the same transcode as a job runs it, in a capped child process
  of its own (``workers.media.isolated``), start-up included: what a device waits.

Writes ``--out`` (else bench/results/local/media.json), a result file of ``bench.results``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CASES = {
    "image_12mp_jpeg": "image",
    "audio_60s_flac": "audio",
    "video_30s_1080p": "video",
}


def generate(workdir: Path) -> dict[str, dict[str, Any]]:
    from tests.workers.media import samples

    made: dict[str, dict[str, Any]] = {}
    makers: dict[str, Callable[[], Path]] = {
        "image_12mp_jpeg": lambda: samples.jpeg_with_orientation(workdir / "photo.jpg"),
        "audio_60s_flac": lambda: samples.sine_audio(workdir / "voice.flac", seconds=60),
        "video_30s_1080p": lambda: samples.video(
            workdir / "clip.mp4", seconds=30, size=(1920, 1080)
        ),
    }
    for case, make in makers.items():
        started = time.perf_counter()
        path = make()
        made[case] = {
            "path": str(path),
            "bytes": path.stat().st_size,
            "generate_seconds": round(time.perf_counter() - started, 3),
        }
    return made


def _vm(field: str) -> int:
    """A ``/proc/self/status`` memory field in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def run_one(kind: str, src: str, out: str) -> dict[str, Any]:
    """Executed in the child process."""
    from workers.media import audio, image, video  # noqa: F401  (imports are not the transcode)
    from workers.media.limits import MediaLimits
    from workers.media.transcoders import TRANSCODERS

    transcode = TRANSCODERS[kind]
    Path(src).stat()
    rss_before = _vm("VmRSS")
    Path("/proc/self/clear_refs").write_text("5", encoding="ascii")  # reset VmHWM to now
    before = resource.getrusage(resource.RUSAGE_SELF)
    tracemalloc.start()
    wall = time.perf_counter()
    result = transcode(Path(src), Path(out), MediaLimits())
    wall = time.perf_counter() - wall
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    after = resource.getrusage(resource.RUSAGE_SELF)
    outputs = {k: Path(v).stat().st_size for k, v in result.items() if isinstance(v, Path)}
    return {
        "seconds": round(wall, 4),
        "cpu_seconds": round(
            (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 4
        ),
        "ru_maxrss_delta_mib": round(
            (after.ru_maxrss - before.ru_maxrss) / 1024, 1
        ),  # KiB on Linux
        "hwm_delta_mib": round((_vm("VmHWM") - rss_before) / 1024, 1),
        "rss_before_mib": round(rss_before / 1024, 1),
        "tracemalloc_peak_mib": round(peak / 2**20, 2),
        "output_bytes": outputs,
        "result": {k: v for k, v in result.items() if not isinstance(v, Path)},
    }


def _job_seconds(kind: str, src: Path, out: Path) -> float:
    """Wall time of the transcode the way a job runs it (child process included)."""
    import asyncio

    from workers.media.isolated import transcode_in_child
    from workers.media.limits import MediaLimits

    started = time.perf_counter()
    asyncio.run(transcode_in_child(kind, src, out, MediaLimits(), 2048))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "SRC", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--generate", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(*args.child)))
        return
    if args.generate:
        print(json.dumps(generate(Path(args.generate))))
        return

    from bench import results

    run = results.begin()
    report: dict[str, Any] = {"cases": {}}
    with tempfile.TemporaryDirectory(prefix="hdg-media-bench-") as tmp:
        workdir = Path(tmp)
        made = subprocess.run(
            [sys.executable, __file__, "--generate", str(workdir)],
            capture_output=True,
            text=True,
            check=True,
        )
        inputs = json.loads(made.stdout)
        for case, kind in CASES.items():
            runs = []
            for n in range(args.repeat):
                out = workdir / f"out-{case}-{n}"
                child = subprocess.run(
                    [sys.executable, __file__, "--child", kind, inputs[case]["path"], str(out)],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=REPO,
                )
                runs.append(json.loads(child.stdout))
            job_seconds = [
                _job_seconds(kind, Path(inputs[case]["path"]), workdir / f"job-{case}-{n}")
                for n in range(args.repeat)
            ]
            summary = {
                "input": {k: v for k, v in inputs[case].items() if k != "path"},
                "median_seconds": statistics.median(r["seconds"] for r in runs),
                "job_median_seconds": round(statistics.median(job_seconds), 4),
                "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
                "max_ru_maxrss_delta_mib": max(r["ru_maxrss_delta_mib"] for r in runs),
                "max_hwm_delta_mib": max(r["hwm_delta_mib"] for r in runs),
                "max_tracemalloc_peak_mib": max(r["tracemalloc_peak_mib"] for r in runs),
                "runs": runs,
            }
            report["cases"][case] = summary
            print(
                f"{case:18s} median {summary['median_seconds']:.3f} s "
                f"(cpu {summary['median_cpu_seconds']:.3f} s), "
                f"peak RSS +{summary['max_hwm_delta_mib']} MiB (ru_maxrss +{summary['max_ru_maxrss_delta_mib']}), "
                f"tracemalloc peak {summary['max_tracemalloc_peak_mib']} MiB, "
                f"as a job {summary['job_median_seconds']:.3f} s, "
                f"input {summary['input']['bytes'] / 2**20:.1f} MiB"
            )
    results.write(
        results.out_path(args.out, "media"),
        run,
        bench="media",
        parameters={"repeat": args.repeat},
        figures=[
            figure
            for case, summary in report["cases"].items()
            for figure in (
                results.figure("transcode", summary["median_seconds"], "s", case=case),
                results.figure("transcode_as_job", summary["job_median_seconds"], "s", case=case),
                results.figure("peak_rss_growth", summary["max_hwm_delta_mib"], "MiB", case=case),
            )
        ],
        detail=report,
    )


if __name__ == "__main__":
    main()
