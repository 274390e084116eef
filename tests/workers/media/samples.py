"""Sample media generated on the fly (Pillow, PyAV): real files and hostile ones.

Used by the media tests and by ``bench/media_bench.py``.
"""

from __future__ import annotations

import array
import io
import math
import os
import struct
import zlib
from fractions import Fraction
from pathlib import Path
from typing import cast

import av
from av.audio.stream import AudioStream
from PIL import ExifTags, Image, ImageDraw

RED = (220, 30, 30)
BLUE = (30, 30, 220)


def jpeg_with_orientation(
    path: Path, size: tuple[int, int] = (4000, 3000), orientation: int = 6
) -> Path:
    """A landscape JPEG (left half red, right half blue) with EXIF Orientation and GPS.

    With orientation 6 ("rotate 90 CW to display") the displayed image is portrait with
    red on top.
    """
    width, height = size
    image = Image.new("RGB", size, BLUE)
    ImageDraw.Draw(image).rectangle([0, 0, width // 2, height], fill=RED)
    # Sensor-like noise, so the JPEG costs what a photo costs to decode.
    noise = Image.effect_noise(size, 24).convert("RGB")
    image = Image.blend(image, noise, 0.15)
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    exif[ExifTags.Base.Make] = "HDG Test Camera"
    gps = exif.get_ifd(ExifTags.IFD.GPSInfo)
    gps[ExifTags.GPS.GPSLatitudeRef] = "N"
    gps[ExifTags.GPS.GPSLatitude] = (48.0, 51.0, 29.0)
    gps[ExifTags.GPS.GPSLongitudeRef] = "E"
    gps[ExifTags.GPS.GPSLongitude] = (2.0, 17.0, 40.0)
    image.save(path, "JPEG", quality=85, exif=exif)
    return path


def png_with_alpha(path: Path, size: tuple[int, int] = (800, 600)) -> Path:
    image = Image.new("RGBA", size, (0, 0, 0, 0))
    ImageDraw.Draw(image).ellipse([100, 100, 500, 500], fill=(0, 200, 0, 255))
    image.save(path, "PNG")
    return path


def truncated(source: Path, path: Path, keep: float = 0.4) -> Path:
    data = source.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def random_bytes(path: Path, size: int = 64 * 1024, seed: int = 1234) -> Path:
    path.write_bytes(os.urandom(0) + _prng_bytes(size, seed))
    return path


def _prng_bytes(size: int, seed: int) -> bytes:
    state = seed
    out = bytearray()
    while len(out) < size:
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        out += state.to_bytes(8, "little")
    return bytes(out[:size])


def png_bomb(path: Path, width: int = 100_000, height: int = 100_000) -> Path:
    """A tiny PNG whose header claims ``width`` x ``height`` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )
    return path


def sine_audio(
    path: Path,
    seconds: float = 60.0,
    rate: int = 44_100,
    layout: str = "stereo",
    codec: str = "flac",
    start_seconds: float = 0.0,
) -> Path:
    """A 440 Hz sine (FLAC by default; ``codec="pcm_s16le"`` with a .wav path for WAV),
    its timestamps starting at ``start_seconds`` (a clip cut from a longer recording)."""
    channels = 2 if layout == "stereo" else 1
    period = array.array(
        "h", (int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(rate))
    )
    with av.open(str(path), mode="w") as container:
        stream = cast(AudioStream, container.add_stream(codec, rate=rate))
        stream.layout = layout
        offset = int(start_seconds * rate)
        total = int(seconds * rate)
        pts = 0
        while pts < total:
            n = min(4096, total - pts)
            samples = array.array("h")
            for i in range(pts, pts + n):
                samples.extend([period[i % rate]] * channels)
            frame = av.AudioFrame(format="s16", layout=layout, samples=n)
            frame.planes[0].update(samples.tobytes())
            frame.sample_rate = rate
            frame.pts = offset + pts
            container.mux(stream.encode(frame))
            pts += n
        container.mux(stream.encode(None))
    return path


def video(
    path: Path,
    seconds: float = 3.0,
    size: tuple[int, int] = (1920, 1080),
    fps: int = 30,
    *,
    audio: bool = True,
    rotation: int = 0,
) -> Path:
    """H.264 (+ AAC) MP4 with moving content, at a low bitrate so it is quick to make."""
    width, height = size
    frames = []
    for k in range(8):
        image = Image.new("RGB", size, (k * 30, 60, 120))
        ImageDraw.Draw(image).rectangle(
            [k * width // 10, height // 5, k * width // 10 + width // 6, height // 2],
            fill=(255, 255, 0),
        )
        frame = av.VideoFrame.from_image(image)  # type: ignore[no-untyped-call]
        frames.append(frame.reformat(format="yuv420p"))
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(
            "libx264", rate=fps, options={"preset": "ultrafast", "crf": "35"}
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if rotation:
            stream.set_display_rotation(rotation)
        sound = container.add_stream("aac", rate=48_000) if audio else None
        if sound is not None:
            sound.layout = "mono"
        for i in range(int(seconds * fps)):
            frame = frames[(i // 4) % len(frames)]
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
        if sound is not None:
            rate = 48_000
            tone = array.array(
                "h", (int(6000 * math.sin(2 * math.pi * 330 * i / rate)) for i in range(rate))
            )
            pts = 0
            while pts < int(seconds * rate):
                n = 1024
                chunk = array.array("h", (tone[(pts + i) % rate] for i in range(n)))
                frame = av.AudioFrame(format="s16", layout="mono", samples=n)
                frame.planes[0].update(chunk.tobytes())
                frame.sample_rate = rate
                frame.pts = pts
                container.mux(sound.encode(frame))
                pts += n
            container.mux(sound.encode(None))
    return path


def mjpeg_growing(path: Path, first: tuple[int, int], then: tuple[int, int], count: int) -> Path:
    """Matroska Motion JPEG whose first frame is ``first`` and whose next ``count`` frames
    are ``then``: each JPEG carries its own size, so the header only knows the first."""

    def jpeg(size: tuple[int, int]) -> bytes:
        buffer = io.BytesIO()
        Image.new("RGB", size, (40, 80, 160)).save(buffer, "JPEG", quality=10)
        return buffer.getvalue()

    with av.open(str(path), mode="w", format="matroska") as container:
        stream = container.add_stream("mjpeg", rate=30)
        stream.width, stream.height, stream.pix_fmt = first[0], first[1], "yuvj420p"
        for index, data in enumerate([jpeg(first)] + [jpeg(then)] * count):
            packet = av.Packet(data)
            packet.stream = stream
            packet.pts = packet.dts = index
            packet.time_base = Fraction(1, 30)
            container.mux(packet)
    return path


def jpeg_scan_bomb(path: Path, size: int = 1024, scans: int = 600) -> Path:
    """A grey progressive JPEG of ``size`` x ``size`` whose first AC scan is repeated
    ``scans`` times: each copy is a few bytes (end-of-band runs over every block) and
    costs the decoder a pass over the whole image."""

    def segment(marker: int, payload: bytes) -> bytes:
        return bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload

    def entropy(codes: list[tuple[int, int]]) -> bytes:
        bits = "".join(format(value, f"0{length}b") for value, length in codes)
        bits += "1" * (-len(bits) % 8)
        out = bytearray()
        for i in range(0, len(bits), 8):
            out.append(int(bits[i : i + 8], 2))
            if out[-1] == 0xFF:
                out.append(0)  # byte stuffing
        return bytes(out)

    blocks = ((size + 7) // 8) ** 2
    assert blocks >= 16384, "each end-of-band run covers 16384 to 32767 blocks"
    one_code = bytes([1] + [0] * 15)  # a Huffman table with one code, "0"
    runs, left = [], blocks
    while left:
        run = left if left <= 32767 else min(32767, left - 16384)
        runs.append(run)
        left -= run
    ac = entropy([c for run in runs for c in ((0, 1), (run - 16384, 14))])
    data = b"\xff\xd8" + segment(0xDB, b"\x00" + b"\x01" * 64)
    data += segment(0xC2, struct.pack(">BHHB", 8, size, size, 1) + b"\x01\x11\x00")
    data += segment(0xC4, b"\x00" + one_code + b"\x00")  # DC: difference 0
    data += segment(0xC4, b"\x10" + one_code + b"\xe0")  # AC: EOB run of 2^14 + 14 bits
    data += segment(0xDA, b"\x01\x01\x00\x00\x00\x00") + entropy([(0, 1)] * blocks)
    data += (segment(0xDA, b"\x01\x01\x00\x01\x3f\x00") + ac) * scans + b"\xff\xd9"
    path.write_bytes(data)
    return path
