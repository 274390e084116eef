"""workers.media.jobs: the media_transcode job, called directly with a ctx (no arq)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from tests.workers.helpers import job_ctx
from tests.workers.media import samples
from workers.context import WorkerResources
from workers.media.jobs import media_transcode

MakeResources = Callable[..., WorkerResources]


def upload(media_root: Path, source: Path, name: str) -> tuple[Path, Path]:
    """Place ``source`` as a server-generated upload; return (src, out_dir)."""
    folder = media_root / "uploads" / name
    folder.mkdir(parents=True)
    src = folder / f"original{source.suffix}"
    shutil.copyfile(source, src)
    return src, media_root / "derived" / name


def job(key: str, kind: str, src: Path | str, out: Path | str) -> dict[str, str]:
    return {"idempotency_key": key, "kind": kind, "src_path": str(src), "out_dir": str(out)}


async def test_an_image_job_returns_outputs_relative_to_the_media_root(
    make_resources: MakeResources, media_root: Path, photo_12mp: Path
) -> None:
    res = make_resources(media_root=media_root)
    src, out = upload(media_root, photo_12mp, "u1")
    result = await media_transcode(job_ctx(res), job("u1", "image", src, out))
    assert result["outcome"] == "done"
    assert result["outputs"] == {"thumbnail": "derived/u1/thumb.webp"}
    assert (result["width"], result["height"]) == (384, 512)
    assert (media_root / "derived/u1/thumb.webp").is_file()


async def test_a_rerun_returns_the_recorded_result_without_transcoding_again(
    make_resources: MakeResources, media_root: Path, sine_60s: Path
) -> None:
    res = make_resources(media_root=media_root)
    src, out = upload(media_root, sine_60s, "v1")
    first = await media_transcode(job_ctx(res), job("v1", "audio", src, out))
    written = (out / "voice.ogg").stat().st_mtime_ns
    again = await media_transcode(job_ctx(res, job_try=2), job("v1", "audio", src, out))
    assert again == {**first, "duplicate": True}
    assert (out / "voice.ogg").stat().st_mtime_ns == written


async def test_a_video_job_produces_poster_and_preview(
    make_resources: MakeResources, media_root: Path, video_1080p: Path
) -> None:
    res = make_resources(media_root=media_root)
    src, out = upload(media_root, video_1080p, "c1")
    result = await media_transcode(job_ctx(res), job("c1", "video", src, out))
    assert result["outputs"] == {
        "preview": "derived/c1/preview.mp4",
        "poster": "derived/c1/poster.webp",
    }


async def test_a_corrupt_file_fails_the_job_with_its_code_and_is_not_marked_done(
    make_resources: MakeResources, media_root: Path, tmp_path: Path
) -> None:
    res = make_resources(media_root=media_root)
    src, out = upload(media_root, samples.random_bytes(tmp_path / "x.jpg"), "bad")
    result = await media_transcode(job_ctx(res), job("bad", "image", src, out))
    assert result == {
        "outcome": "failed",
        "code": "corrupt",
        "reason": "not a readable image",
        "kind": "image",
    }
    assert await res.idempotency.get("bad") is None


async def test_a_bomb_fails_as_too_large(
    make_resources: MakeResources, media_root: Path, tmp_path: Path
) -> None:
    res = make_resources(media_root=media_root)
    src, out = upload(media_root, samples.png_bomb(tmp_path / "bomb.png"), "bomb")
    assert (await media_transcode(job_ctx(res), job("bomb", "image", src, out)))[
        "code"
    ] == "too_large"


async def test_a_source_outside_the_media_root_is_refused(
    make_resources: MakeResources, media_root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"not yours")
    res = make_resources(media_root=media_root)
    for src in (secret, media_root / ".." / "secret.jpg", "../secret.jpg"):
        result = await media_transcode(job_ctx(res), job("k", "image", src, media_root / "out"))
        assert result["code"] == "unsafe_path", src
    assert not (media_root / "out").exists()


async def test_a_symlink_escaping_the_media_root_is_refused(
    make_resources: MakeResources, media_root: Path, photo_12mp: Path
) -> None:
    (media_root / "link.jpg").symlink_to(photo_12mp)
    res = make_resources(media_root=media_root)
    result = await media_transcode(
        job_ctx(res), job("k", "image", media_root / "link.jpg", media_root / "o")
    )
    assert result["code"] == "unsafe_path"


async def test_an_output_directory_outside_the_root_is_refused(
    make_resources: MakeResources, media_root: Path, photo_12mp: Path, tmp_path: Path
) -> None:
    res = make_resources(media_root=media_root)
    src, _ = upload(media_root, photo_12mp, "u")
    for out in (tmp_path / "elsewhere", media_root):
        result = await media_transcode(job_ctx(res), job("k", "image", src, out))
        assert result["code"] == "unsafe_path"


async def test_without_a_media_root_the_job_fails_and_names_the_setting(
    make_resources: MakeResources,
) -> None:
    result = await media_transcode(job_ctx(make_resources()), job("k", "image", "/a.jpg", "/out"))
    assert result["code"] == "not_configured"
    assert result["reason"].startswith("HDG_MEDIA_ROOT")


async def test_a_malformed_job_fails_without_raising(
    make_resources: MakeResources, media_root: Path
) -> None:
    res = make_resources(media_root=media_root)
    result = await media_transcode(
        job_ctx(res), {"idempotency_key": "k", "kind": "pdf", "src_path": "a", "out_dir": "b"}
    )
    assert result["code"] == "bad_payload"


async def test_transcoding_runs_off_the_event_loop(
    make_resources: MakeResources, media_root: Path, tmp_path: Path
) -> None:
    res = make_resources(media_root=media_root)
    clip = samples.video(tmp_path / "clip.mp4", seconds=10, size=(1280, 720), audio=False)
    src, out = upload(media_root, clip, "busy")
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    started = time.perf_counter()
    result = await media_transcode(job_ctx(res), job("busy", "video", src, out))
    elapsed = time.perf_counter() - started
    tick.cancel()
    assert result["outcome"] == "done"
    assert elapsed > 0.3  # long enough for the measurement to mean something
    assert max(gaps) < 0.15  # the loop kept ticking every ~10 ms throughout
