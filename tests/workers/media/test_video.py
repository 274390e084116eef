"""workers.media.video: poster frame and short preview."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import pytest
from PIL import Image

from tests.workers.media import samples
from workers.errors import MediaError
from workers.media import video
from workers.media.limits import MediaLimits
from workers.media.video import make_video_preview, preview_size

LIMITS = MediaLimits()


def test_a_1080p_clip_gets_a_poster_and_a_360p_h264_preview(
    video_1080p: Path, tmp_path: Path
) -> None:
    result = make_video_preview(video_1080p, tmp_path, LIMITS)
    with Image.open(result["poster"]) as poster:
        assert poster.format == "WEBP"
        assert poster.size == (512, 288)
    with av.open(str(result["preview"])) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264"
        assert (stream.width, stream.height) == (640, 360)
        frames = list(container.decode(stream))
    assert len(frames) == result["frames"] == 90
    assert result["duration"] == pytest.approx(3.0, abs=0.05)


def test_the_preview_stops_at_ten_seconds_and_thirty_fps(tmp_path: Path) -> None:
    src = samples.video(tmp_path / "long.mp4", seconds=12, size=(320, 240), fps=60, audio=False)
    result = make_video_preview(src, tmp_path / "out", LIMITS)
    assert result["duration"] <= 10.0
    with av.open(str(result["preview"])) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
        last = frames[-1].time
    assert len(frames) == 300
    assert last is not None and last < 10.0
    assert stream.average_rate == Fraction(30)


def test_a_portrait_phone_video_keeps_its_rotation(tmp_path: Path) -> None:
    src = samples.video(tmp_path / "portrait.mp4", seconds=1, size=(640, 360), rotation=-90)
    result = make_video_preview(src, tmp_path / "out", LIMITS)
    assert (result["width"], result["height"]) == (360, 640)
    with Image.open(result["poster"]) as poster:
        assert poster.size == (288, 512)  # pixels rotated upright
    with av.open(str(result["preview"])) as container:
        first = next(container.decode(video=0))
    assert first.rotation == -90  # display matrix carried over


def test_preview_sizes_are_even_and_never_upscaled() -> None:
    assert preview_size(1920, 1080, 360) == (640, 360)
    assert preview_size(1080, 1920, 360) == (360, 640)
    assert preview_size(1366, 768, 360) == (640, 360)
    assert preview_size(320, 240, 360) == (320, 240)
    assert preview_size(333, 201, 360) == (332, 200)  # odd sides: even, never larger


def test_random_bytes_are_corrupt(tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        make_video_preview(samples.random_bytes(tmp_path / "clip.mp4"), tmp_path / "out", LIMITS)
    assert raised.value.code == "corrupt"


def test_a_truncated_mp4_is_corrupt(video_1080p: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        make_video_preview(
            samples.truncated(video_1080p, tmp_path / "cut.mp4", 0.3), tmp_path / "out", LIMITS
        )
    assert raised.value.code == "corrupt"


def test_a_job_failing_after_its_poster_leaves_no_poster_behind(
    video_1080p: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = video._write_poster

    def poster_then_fail(*args: Any) -> None:  # a decoder error right after the first frame
        real(*args)
        raise MediaError("corrupt", "video decoding failed: invalid data")

    monkeypatch.setattr(video, "_write_poster", poster_then_fail)
    with pytest.raises(MediaError):
        make_video_preview(video_1080p, tmp_path / "out", LIMITS)
    assert list((tmp_path / "out").iterdir()) == []


def test_an_audio_file_is_not_a_video(sine_60s: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        make_video_preview(sine_60s, tmp_path / "out", LIMITS)
    assert raised.value.code == "unsupported"


def test_a_playlist_pointing_at_local_files_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    hls = tmp_path / "clip.mp4"
    hls.write_text(
        f"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n{secret}\n#EXT-X-ENDLIST\n",
        encoding="utf-8",
    )
    with pytest.raises(MediaError) as raised:
        make_video_preview(hls, tmp_path / "out", LIMITS)
    assert raised.value.code in ("corrupt", "unsupported")
    assert not (tmp_path / "out" / "preview.mp4").exists()


def test_frames_over_the_pixel_cap_are_too_large(video_1080p: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        make_video_preview(video_1080p, tmp_path, MediaLimits(max_pixels=1_000_000))
    assert raised.value.code == "too_large"


def test_frames_growing_past_the_pixel_cap_mid_stream_are_too_large(tmp_path: Path) -> None:
    # The header (and the first frame) are small; the frames after it are over the cap.
    src = samples.mjpeg_growing(tmp_path / "clip.mkv", (320, 240), (1600, 1200), count=3)
    with pytest.raises(MediaError) as raised:
        make_video_preview(src, tmp_path / "out", MediaLimits(max_pixels=1_000_000))
    assert raised.value.code == "too_large"
    assert list((tmp_path / "out").iterdir()) == []
    # Under the cap, the same file is a video like any other.
    result = make_video_preview(src, tmp_path / "ok", MediaLimits(max_pixels=2_000_000))
    assert (result["source_width"], result["frames"]) == (320, 4)
