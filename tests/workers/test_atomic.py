"""workers.atomic: outputs appear whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.atomic import atomic_output, atomic_write_bytes


def test_the_final_file_appears_only_on_success(tmp_path: Path) -> None:
    final = tmp_path / "out" / "thumb.webp"
    with atomic_output(final) as tmp:
        tmp.write_bytes(b"partial")
        assert not final.exists()
        assert tmp.parent == final.parent and tmp.name.startswith(".thumb.webp.")
    assert final.read_bytes() == b"partial"
    assert [p.name for p in final.parent.iterdir()] == ["thumb.webp"]


def test_a_failure_keeps_the_previous_output_and_removes_the_temporary(tmp_path: Path) -> None:
    final = tmp_path / "thumb.webp"
    atomic_write_bytes(final, b"version 1")
    with pytest.raises(RuntimeError), atomic_output(final) as tmp:
        tmp.write_bytes(b"half of version 2")
        raise RuntimeError("killed")
    assert final.read_bytes() == b"version 1"
    assert [p.name for p in tmp_path.iterdir()] == ["thumb.webp"]


def test_a_rerun_replaces_the_output_whole(tmp_path: Path) -> None:
    final = tmp_path / "a.bin"
    atomic_write_bytes(final, b"x" * 1000)
    atomic_write_bytes(final, b"y" * 10)
    assert final.read_bytes() == b"y" * 10
