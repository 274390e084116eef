"""workers.media.isolated: each transcode in a process of its own, capped and killable."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.workers.media import samples
from workers.errors import MediaError
from workers.media.isolated import outcome, transcode_in_child
from workers.media.limits import MediaLimits


def test_a_reported_result_gives_its_outputs_back_as_paths() -> None:
    report = b'{"paths": {"thumbnail": "/m/d/thumb.jpg"}, "details": {"width": 512}}\n'
    assert outcome(report, 0) == {"thumbnail": Path("/m/d/thumb.jpg"), "width": 512}


def test_a_reported_media_error_is_raised_with_its_code() -> None:
    with pytest.raises(MediaError) as raised:
        outcome(b'{"error": {"code": "too_large", "reason": "big"}}', 0)
    assert (raised.value.code, raised.value.message) == ("too_large", "big")


def test_a_code_the_job_does_not_know_becomes_corrupt() -> None:
    with pytest.raises(MediaError) as raised:
        outcome(b'{"error": {"code": "exploded", "reason": "?"}}', 0)
    assert raised.value.code == "corrupt"


def test_a_child_killed_without_an_outcome_fails_the_file_and_says_how() -> None:
    with pytest.raises(MediaError, match="killed by SIGKILL") as raised:
        outcome(b"", -9)
    assert raised.value.code == "corrupt"


@given(st.binary(max_size=200), st.one_of(st.none(), st.integers(-64, 255)))
def test_whatever_a_child_writes_is_a_result_or_a_media_error(
    stdout: bytes, returncode: int | None
) -> None:
    try:
        result = outcome(stdout, returncode)
    except MediaError as exc:
        assert exc.code in ("corrupt", "too_large", "unsupported")
    else:
        assert isinstance(result, dict)


async def test_every_limit_the_job_sets_reaches_the_child(tmp_path: Path) -> None:
    src = samples.png_with_alpha(tmp_path / "photo.png", size=(800, 600))
    result = await transcode_in_child("image", src, tmp_path / "out", MediaLimits(thumb_size=96), 0)
    assert max(result["width"], result["height"]) == 96
    assert result["thumbnail"].is_file()


async def test_frames_needing_more_than_the_memory_cap_are_too_large(tmp_path: Path) -> None:
    # 108 MP frames after a small first one: under this pixel cap, over this memory cap.
    src = samples.mjpeg_growing(tmp_path / "clip.mkv", (320, 240), (12000, 9000), count=2)
    limits = MediaLimits(max_pixels=200_000_000)
    with pytest.raises(MediaError) as raised:
        await transcode_in_child("video", src, tmp_path / "capped", limits, memory_mb=260)
    assert raised.value.code == "too_large"
    # With room to decode it, the same file is a video like any other...
    result = await transcode_in_child("video", src, tmp_path / "roomy", limits, memory_mb=2048)
    assert result["frames"] == 3 and result["preview"].is_file()
    # ...and an ordinary video fits the small cap.
    small = samples.video(tmp_path / "small.mp4", seconds=1.0, size=(640, 360), audio=False)
    ordinary = await transcode_in_child("video", small, tmp_path / "small", MediaLimits(), 260)
    assert ordinary["preview"].is_file()


def _transcoder_children(parent: int | None = None) -> list[int]:
    """The children of `parent` (this process) running workers.media.child, zombies not
    counted (whoever adopted an orphan may not reap it at once)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and b"workers.media.child" in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_a_transcode_whose_job_is_cancelled_is_killed_with_it(tmp_path: Path) -> None:
    src = samples.video(tmp_path / "long.mp4", seconds=6.0, size=(1280, 720), audio=False)
    limits = MediaLimits(preview_seconds=6.0)
    task = asyncio.create_task(transcode_in_child("video", src, tmp_path / "out", limits, 2048))
    for _ in range(200):
        if _transcoder_children():
            break
        await asyncio.sleep(0.01)
    assert _transcoder_children(), "the transcode runs in a child"
    task.cancel()  # what a job timeout or a stopping worker does
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _transcoder_children() == []
    assert not any((tmp_path / "out").glob("*.mp4"))


WORKER = """
import asyncio, sys
from pathlib import Path
from workers.media.isolated import transcode_in_child
from workers.media.limits import MediaLimits
asyncio.run(transcode_in_child("video", Path(sys.argv[1]), Path(sys.argv[2]),
                               MediaLimits(preview_seconds=12.0), 2048))
"""


async def test_a_transcode_dies_with_a_worker_killed_under_it(tmp_path: Path) -> None:
    # Seconds of transcoding left when the worker dies; the child must go within one.
    src = samples.video(tmp_path / "long.mp4", seconds=12.0, size=(1280, 720), audio=False)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, str(src), str(tmp_path / "out")
    )
    try:
        children: list[int] = []
        for _ in range(500):
            children = _transcoder_children(worker.pid)
            if children:
                break
            await asyncio.sleep(0.01)
        assert children, "the worker's transcode runs in a child"
        worker.kill()  # SIGKILL: the worker gets no chance to clean up
        await worker.wait()
        for _ in range(100):
            if not _alive(children[0]):
                break
            await asyncio.sleep(0.01)
        assert not _alive(children[0]), "the orphaned transcode runs on"
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
