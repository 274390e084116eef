"""Reading a QR code back, the way a phone camera would: from a PNG or from the terminal."""

from __future__ import annotations

from pathlib import Path

import zxingcpp
from PIL import Image

# segno's compact terminal writer: dark modules print as spaces (light terminal glyphs
# on a dark background); each character holds two rows (top, bottom).
_HALF_BLOCKS = {" ": (1, 1), "\u2580": (0, 1), "\u2584": (1, 0), "\u2588": (0, 0)}


def decode_image(image: Image.Image) -> str:
    results = zxingcpp.read_barcodes(image)
    assert len(results) == 1, f"expected one QR code, found {len(results)}"
    return str(results[0].text)


def decode_png(path: Path) -> str:
    with Image.open(path) as image:
        image.load()
        return decode_image(image)


def decode_terminal(text: str, scale: int = 8) -> str:
    """The QR code printed by `segno ... terminal(compact=True)` in ``text``."""
    lines = [line for line in text.splitlines() if line and set(line) <= set(_HALF_BLOCKS)]
    width = max(len(line) for line in lines)
    block = [line for line in lines if len(line) == width]
    rows: list[list[int]] = []
    for line in block:
        pairs = [_HALF_BLOCKS[ch] for ch in line]
        rows.append([top for top, _ in pairs])
        rows.append([bottom for _, bottom in pairs])
    rows = rows[:width]  # the code is square; an odd height has a filler row
    image = Image.new("L", (width * scale, len(rows) * scale), 255)
    pixels = image.load()
    assert pixels is not None
    for y, row in enumerate(rows):
        for x, dark in enumerate(row):
            if dark:
                for dy in range(scale):
                    for dx in range(scale):
                        pixels[x * scale + dx, y * scale + dy] = 0
    return decode_image(image)
