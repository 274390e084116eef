"""Voice and audio to Opus in Ogg: 48 kHz mono, ~32 kb/s (PyAV, libopus)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import av
from av.container import InputContainer, OutputContainer

from ..atomic import atomic_output
from ..errors import MediaError
from ._av import AUDIO_DEMUXERS, ffmpeg_errors, open_input
from .limits import MediaLimits

__all__ = ["VOICE_NAME", "transcode_voice"]

VOICE_NAME = "voice.ogg"
OPUS_RATE = 48_000


def transcode_voice(src: Path, out_dir: Path, limits: MediaLimits) -> dict[str, Any]:
    """Write ``out_dir/voice.ogg`` (Opus) from the audio at ``src``."""
    out = out_dir / VOICE_NAME
    with open_input(src, AUDIO_DEMUXERS) as inp:
        if not inp.streams.audio:
            raise MediaError("unsupported", "the file has no audio stream")
        stream = inp.streams.audio[0]
        if stream.codec_context is None:
            raise MediaError("unsupported", "no decoder for this audio codec")
        # FFmpeg's container duration of some files (Matroska, Ogg) is their last timestamp,
        # so a clip cut from a long recording seems long: take off where it starts.
        declared = _declared_seconds(inp)
        if declared is not None and declared > limits.max_seconds:
            raise MediaError(
                "too_large",
                f"{declared:.0f} s of audio exceeds the cap of {limits.max_seconds:.0f} s",
            )
        with atomic_output(out) as tmp, av.open(str(tmp), mode="w", format="ogg") as oc:
            encoder = oc.add_stream("libopus", rate=OPUS_RATE)
            encoder.layout = "mono"
            encoder.bit_rate = limits.voice_bitrate
            resampler = av.AudioResampler(format="s16", layout="mono", rate=OPUS_RATE)
            samples = 0
            decoded = 0.0  # seconds of sound, whatever the timestamps say
            with ffmpeg_errors("audio decoding"):
                for frame in inp.decode(stream):
                    # Timestamps may start late (a clip of a long recording) or start over
                    # (chained Ogg): what counts is how much sound was decoded.
                    decoded += frame.samples / (frame.sample_rate or OPUS_RATE)
                    if decoded > limits.max_seconds:
                        raise MediaError(
                            "too_large", f"audio runs past the cap of {limits.max_seconds:.0f} s"
                        )
                    frame.pts = None  # the output's own clock below, never the source's
                    for chunk in resampler.resample(frame):
                        samples = _encode(oc, encoder, chunk, samples)
                for chunk in resampler.resample(None):
                    samples = _encode(oc, encoder, chunk, samples)
                oc.mux(encoder.encode(None))
            if samples == 0:
                raise MediaError("corrupt", "no audio could be decoded")
    return {
        "audio": out,
        "codec": "opus",
        "sample_rate": OPUS_RATE,
        "channels": 1,
        "duration": round(samples / OPUS_RATE, 3),
    }


def _declared_seconds(inp: InputContainer) -> float | None:
    if not inp.duration:
        return None
    start = inp.start_time if inp.start_time and inp.start_time > 0 else 0
    return max(0, inp.duration - start) / av.time_base


def _encode(oc: OutputContainer, encoder: Any, chunk: av.AudioFrame, samples: int) -> int:
    """Encode ``chunk`` at ``samples`` on the output's 48 kHz clock; the new count."""
    chunk.pts = samples
    chunk.time_base = Fraction(1, OPUS_RATE)
    oc.mux(encoder.encode(chunk))
    return samples + chunk.samples
