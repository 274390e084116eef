"""All transcoders: mutated files fail with MediaError (or transcode), nothing else."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.workers.media import samples
from workers.errors import MediaError
from workers.media.audio import transcode_voice
from workers.media.image import make_thumbnail
from workers.media.limits import MediaLimits
from workers.media.video import make_video_preview

Transcoder = Callable[[Path, Path, MediaLimits], dict[str, Any]]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[bytes, str, Transcoder]]:
    folder = tmp_path_factory.mktemp("fuzz-seeds")
    made: list[tuple[Path, Transcoder]] = []
    small = Image.new("RGB", (64, 48), (10, 200, 30))
    for fmt in ("JPEG", "PNG", "WEBP", "GIF"):
        path = folder / f"seed.{fmt.lower()}"
        small.save(path, fmt)
        made.append((path, make_thumbnail))
    made.append((samples.jpeg_with_orientation(folder / "exif.jpg", size=(64, 48)), make_thumbnail))
    made.append((samples.sine_audio(folder / "seed.flac", seconds=1, rate=8000), transcode_voice))
    clip = samples.video(folder / "seed.mp4", seconds=0.5, size=(64, 48))
    made.append((clip, make_video_preview))
    made.append((clip, transcode_voice))
    return [(path.read_bytes(), path.suffix, transcode) for path, transcode in made]


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert"]),
        st.integers(0, 2**20),
        st.binary(min_size=1, max_size=16),
    ),
    min_size=1,
    max_size=12,
)


def mutate(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    buf = bytearray(data)
    for op, where, blob in edits:
        pos = where % max(len(buf), 1)
        if op == "flip":
            buf[pos : pos + len(blob)] = blob
        elif op == "cut":
            del buf[pos : pos + len(blob) * 8]
        else:
            buf[pos:pos] = blob
    return bytes(buf) or b"\x00"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data(), mutations)
def test_a_mutated_file_transcodes_or_fails_with_a_media_error(
    seeds: list[tuple[bytes, str, Transcoder]],
    data: st.DataObject,
    edits: list[tuple[str, int, bytes]],
) -> None:
    original, suffix, transcode = data.draw(st.sampled_from(seeds))
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"input{suffix}"
        src.write_bytes(mutate(original, edits))
        try:
            transcode(src, Path(tmp) / "out", MediaLimits())
        except MediaError as exc:
            assert exc.code in ("corrupt", "too_large", "unsupported")
