"""workers.media.audio: voice to Opus/Ogg."""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from tests.workers.media import samples
from workers.errors import MediaError
from workers.media.audio import transcode_voice
from workers.media.limits import MediaLimits

LIMITS = MediaLimits()


def test_sixty_seconds_of_stereo_flac_become_48khz_mono_opus_in_ogg(
    sine_60s: Path, tmp_path: Path
) -> None:
    result = transcode_voice(sine_60s, tmp_path, LIMITS)
    assert result["duration"] == pytest.approx(60.0, abs=0.05)
    with av.open(str(result["audio"])) as container:
        assert container.format.name == "ogg"
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus"
        assert stream.rate == 48_000
        assert stream.channels == 1
        decoded = sum(frame.samples for frame in container.decode(stream))
    assert decoded / 48_000 == pytest.approx(60.0, abs=0.05)
    assert result["audio"].stat().st_size < 400_000  # ~32 kb/s, not PCM


def test_wav_input_works_too(tmp_path: Path) -> None:
    src = samples.sine_audio(
        tmp_path / "note.wav", seconds=2, rate=16_000, layout="mono", codec="pcm_s16le"
    )
    assert transcode_voice(src, tmp_path / "out", LIMITS)["duration"] == pytest.approx(
        2.0, abs=0.05
    )


def test_the_audio_track_of_a_video_is_transcoded(video_1080p: Path, tmp_path: Path) -> None:
    assert transcode_voice(video_1080p, tmp_path, LIMITS)["duration"] == pytest.approx(3.0, abs=0.1)


def test_audio_longer_than_the_cap_is_too_large(sine_60s: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        transcode_voice(sine_60s, tmp_path, MediaLimits(max_seconds=10))
    assert raised.value.code == "too_large"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["clip.mka", "clip.ogg"])
def test_a_short_clip_whose_timestamps_start_late_is_not_too_large(
    name: str, tmp_path: Path
) -> None:
    # Cut from a long recording: five seconds of sound stamped from 4000 s on.
    codec = "libopus" if name.endswith(".ogg") else "flac"
    src = samples.sine_audio(
        tmp_path / name, seconds=5, rate=48_000, layout="mono", codec=codec, start_seconds=4000
    )
    result = transcode_voice(src, tmp_path / "out", LIMITS)
    assert result["duration"] == pytest.approx(5.0, abs=0.05)


def test_chained_ogg_is_transcoded_whole_and_counted_against_the_cap(tmp_path: Path) -> None:
    # Ogg links one after another, each with timestamps from zero (a recorder or stream
    # dump that starts a new link): the sound adds up, the timestamps do not.
    link = samples.sine_audio(
        tmp_path / "link.ogg", seconds=5, rate=48_000, layout="mono", codec="libopus"
    )
    chained = tmp_path / "chained.ogg"
    chained.write_bytes(link.read_bytes() * 4)
    result = transcode_voice(chained, tmp_path / "out", LIMITS)
    assert result["duration"] == pytest.approx(20.0, abs=0.05)
    with av.open(str(result["audio"])) as container:
        decoded = sum(frame.samples for frame in container.decode(container.streams.audio[0]))
    assert decoded / 48_000 == pytest.approx(20.0, abs=0.05)

    with pytest.raises(MediaError) as raised:
        transcode_voice(chained, tmp_path / "capped", MediaLimits(max_seconds=8))
    assert raised.value.code == "too_large"
    assert not (tmp_path / "capped").exists() or list((tmp_path / "capped").iterdir()) == []


def test_random_bytes_are_corrupt(tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        transcode_voice(samples.random_bytes(tmp_path / "voice.m4a"), tmp_path / "out", LIMITS)
    assert raised.value.code == "corrupt"


def test_a_video_without_sound_is_unsupported(tmp_path: Path) -> None:
    src = samples.video(tmp_path / "mute.mp4", seconds=1, size=(320, 240), audio=False)
    with pytest.raises(MediaError) as raised:
        transcode_voice(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "unsupported"


def test_a_truncated_file_fails_cleanly(sine_60s: Path, tmp_path: Path) -> None:
    src = samples.truncated(sine_60s, tmp_path / "cut.flac", keep=0.01)
    try:
        result = transcode_voice(src, tmp_path / "out", LIMITS)
    except MediaError as exc:
        assert exc.code == "corrupt"
    else:  # FLAC frames are self-delimiting: the readable prefix transcodes
        assert 0 < result["duration"] < 60
