"""workers.paths: job paths stay under the media root."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.errors import UnsafePathError
from workers.paths import confine


def test_paths_inside_the_root_resolve(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert confine(tmp_path, tmp_path / "a" / "b.jpg") == (tmp_path / "a" / "b.jpg").resolve()
    assert confine(tmp_path, "a/b.jpg") == (tmp_path / "a" / "b.jpg").resolve()


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "."])
def test_paths_escaping_the_root_or_naming_it_are_refused(tmp_path: Path, path: str) -> None:
    root = tmp_path / "media"
    root.mkdir()
    with pytest.raises(UnsafePathError):
        confine(root, path)


def test_symlinks_are_judged_by_their_target(tmp_path: Path) -> None:
    root = tmp_path / "media"
    root.mkdir()
    (root / "escape").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError):
        confine(root, "escape/secret")


def test_must_be_file_refuses_directories_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    for path in ("dir", "missing.jpg"):
        with pytest.raises(UnsafePathError):
            confine(tmp_path, path, must_be_file=True)
