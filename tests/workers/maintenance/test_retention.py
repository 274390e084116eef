"""workers.maintenance.retention: the media sweep and its extension hook."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.helpers import job_ctx
from workers.atomic import temp_sibling
from workers.context import WorkerResources
from workers.maintenance.retention import extra_retention_tasks, retention_sweep, sweep_files

DAY = 86_400.0


def make_file(path: Path, age_days: float, size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    then = time.time() - age_days * DAY
    os.utime(path, (then, then))
    return path


def age_dir(path: Path, age_days: float) -> None:
    then = time.time() - age_days * DAY
    os.utime(path, (then, then))


@pytest.fixture
def hooks() -> Iterator[list[Any]]:
    saved = list(extra_retention_tasks)
    extra_retention_tasks.clear()
    yield extra_retention_tasks
    extra_retention_tasks[:] = saved


def test_only_files_older_than_the_cutoff_are_deleted(tmp_path: Path) -> None:
    old = make_file(tmp_path / "u1" / "original.jpg", age_days=8, size=100)
    new = make_file(tmp_path / "u2" / "original.jpg", age_days=1)
    report = sweep_files(tmp_path, time.time() - 7 * DAY)
    assert not old.exists() and new.exists()
    assert (report.files_deleted, report.bytes_deleted) == (1, 100)


def test_old_directories_are_removed_once_empty_but_never_the_root(tmp_path: Path) -> None:
    make_file(tmp_path / "u1" / "a" / "thumb.webp", age_days=9)
    age_dir(tmp_path / "u1" / "a", 9)
    age_dir(tmp_path / "u1", 9)
    fresh_empty = tmp_path / "just-created"
    fresh_empty.mkdir()
    report = sweep_files(tmp_path, time.time() - 7 * DAY)
    assert report.dirs_deleted == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["just-created"]
    assert tmp_path.is_dir()


def test_a_directory_holding_a_fresh_file_survives(tmp_path: Path) -> None:
    make_file(tmp_path / "u1" / "old.jpg", age_days=9)
    make_file(tmp_path / "u1" / "new.part", age_days=0)
    age_dir(tmp_path / "u1", 9)
    sweep_files(tmp_path, time.time() - 7 * DAY)
    assert [p.name for p in (tmp_path / "u1").iterdir()] == ["new.part"]


def test_files_vanishing_mid_sweep_are_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        make_file(tmp_path / f"f{i}", age_days=10)
    real_unlink = os.unlink

    def racing_unlink(path: str) -> None:
        if path.endswith("f1"):
            real_unlink(path)  # someone else got there first
        real_unlink(path)

    monkeypatch.setattr("workers.maintenance.retention.os.unlink", racing_unlink)
    report = sweep_files(tmp_path, time.time() - 7 * DAY)
    assert report.files_deleted == 2
    assert report.errors == []
    assert list(tmp_path.iterdir()) == []


def test_symlinks_are_removed_as_links_and_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "media"
    outside = tmp_path / "outside"
    target = make_file(outside / "precious.jpg", age_days=30)
    age_dir(outside, 30)
    root.mkdir()
    (root / "file-link").symlink_to(target)
    (root / "dir-link").symlink_to(outside, target_is_directory=True)
    for link in ("file-link", "dir-link"):
        then = time.time() - 30 * DAY
        os.utime(root / link, (then, then), follow_symlinks=False)
    sweep_files(root, time.time() - 7 * DAY)
    assert target.exists() and outside.is_dir()
    assert list(root.iterdir()) == []


def test_a_missing_root_is_an_empty_sweep(tmp_path: Path) -> None:
    assert sweep_files(tmp_path / "nope", time.time()).files_deleted == 0


async def test_the_job_uses_the_retention_setting_and_runs_the_extra_tasks(
    make_resources: Callable[..., WorkerResources], media_root: Path, hooks: list[Any]
) -> None:
    make_file(media_root / "a.jpg", age_days=3)
    make_file(media_root / "b.jpg", age_days=1)
    seen: list[dict[str, Any]] = []

    async def trim_outbox(ctx: dict[str, Any]) -> None:
        seen.append(ctx)

    async def broken(ctx: dict[str, Any]) -> None:
        raise RuntimeError("outbox unavailable")

    async def after(ctx: dict[str, Any]) -> None:
        seen.append(ctx)

    hooks.extend([trim_outbox, broken, after])
    res = make_resources(media_root=media_root, media_retention_days=2)
    result = await retention_sweep(job_ctx(res))
    assert result["files_deleted"] == 1
    assert os.listdir(media_root) == ["b.jpg"]
    assert len(seen) == 2 and seen[0]["hdg"] is res
    outcomes = {name.rsplit(".", 1)[-1]: value for name, value in result["extra_tasks"].items()}
    assert outcomes == {
        "trim_outbox": "ok",
        "broken": "failed: RuntimeError('outbox unavailable')",
        "after": "ok",
    }


async def test_without_a_media_root_only_the_extra_tasks_run(
    make_resources: Callable[..., WorkerResources], hooks: list[Any]
) -> None:
    result = await retention_sweep(job_ctx(make_resources()))
    assert result == {"media_root": None, "extra_tasks": {}}


def test_registered_attachments_and_their_previews_are_left_to_the_registry(
    tmp_path: Path,
) -> None:
    # The plugin expires attachments on its own schedule (maybe longer, maybe never).
    kept, gone = "a" * 32, "b" * 32
    attachment = make_file(tmp_path / "t1" / kept, age_days=30)
    preview = make_file(tmp_path / "t1" / "derived" / kept / "poster.webp", age_days=30)
    orphan = make_file(tmp_path / "t1" / "derived" / gone / "poster.webp", age_days=30)
    leftover = make_file(tmp_path / "t1" / "uploads" / f"{gone}.part", age_days=30)
    at_the_root = make_file(tmp_path / kept, age_days=30)  # not a tenant's attachment
    report = sweep_files(tmp_path, time.time() - 7 * DAY)
    assert attachment.exists() and preview.exists()
    assert not orphan.exists() and not leftover.exists() and not at_the_root.exists()
    assert report.files_deleted == 3


def test_a_killed_jobs_temporary_file_among_live_previews_is_swept(tmp_path: Path) -> None:
    # A worker killed while writing a preview leaves its temporary sibling; the re-run
    # writes under a new name, so nothing else ever removes it while the attachment lives.
    kept = "c" * 32
    attachment = make_file(tmp_path / "t1" / kept, age_days=30)
    derived = tmp_path / "t1" / "derived" / kept
    preview = make_file(derived / "preview.mp4", age_days=30)
    stale = make_file(temp_sibling(preview), age_days=30, size=1000)
    writing = make_file(temp_sibling(derived / "poster.webp"), age_days=0)  # a job at work
    report = sweep_files(tmp_path, time.time() - 7 * DAY)
    assert attachment.exists() and preview.exists() and writing.exists()
    assert not stale.exists()
    assert (report.files_deleted, report.bytes_deleted, report.errors) == (1, 1000, [])
