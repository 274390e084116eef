"""Voice and audio to Opus in Ogg: 48 kHz mono, ~32 kb/s (PyAV, libopus)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import av

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
        declared = inp.duration / av.time_base if inp.duration else None
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
            with ffmpeg_errors("audio decoding"):
                for frame in inp.decode(stream):
                    if frame.time is not None and frame.time > limits.max_seconds:
                        raise MediaError(
                            "too_large", f"audio runs past the cap of {limits.max_seconds:.0f} s"
                        )
                    for chunk in resampler.resample(frame):
                        samples += chunk.samples
                        oc.mux(encoder.encode(chunk))
                for chunk in resampler.resample(None):
                    samples += chunk.samples
                    oc.mux(encoder.encode(chunk))
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
