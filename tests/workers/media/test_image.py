"""workers.media.image: thumbnails from real and hostile files."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.workers.media import samples
from workers.errors import MediaError
from workers.media.image import MAX_JPEG_SCANS, jpeg_scans, make_thumbnail
from workers.media.limits import MediaLimits

LIMITS = MediaLimits()


def pixel(image: Image.Image, x: int, y: int) -> tuple[int, ...]:
    value = image.getpixel((x, y))
    assert isinstance(value, tuple)
    return value


def is_red(pixel: tuple[int, ...]) -> bool:
    return pixel[0] > 150 and pixel[2] < 100


def is_blue(pixel: tuple[int, ...]) -> bool:
    return pixel[2] > 150 and pixel[0] < 100


def test_a_12mp_photo_becomes_a_512px_webp_with_orientation_applied(
    photo_12mp: Path, tmp_path: Path
) -> None:
    result = make_thumbnail(photo_12mp, tmp_path, LIMITS)
    assert (result["source_width"], result["source_height"]) == (4000, 3000)
    with Image.open(result["thumbnail"]) as thumb:
        assert thumb.format == "WEBP"
        assert thumb.size == (384, 512)  # portrait: EXIF orientation 6 applied
        rgb = thumb.convert("RGB")
        assert is_red(pixel(rgb, 192, 20))  # the stored left (red) half is on top
        assert is_blue(pixel(rgb, 192, 490))


def test_the_thumbnail_carries_no_exif_gps_or_icc(photo_12mp: Path, tmp_path: Path) -> None:
    with Image.open(photo_12mp) as original:
        assert original.getexif().get_ifd(0x8825)  # the source does have GPS
    result = make_thumbnail(photo_12mp, tmp_path, LIMITS)
    with Image.open(result["thumbnail"]) as thumb:
        assert len(thumb.getexif()) == 0
        assert "exif" not in thumb.info
        assert "icc_profile" not in thumb.info
        assert "xmp" not in thumb.info


def test_transparency_survives(tmp_path: Path) -> None:
    src = samples.png_with_alpha(tmp_path / "alpha.png")
    result = make_thumbnail(src, tmp_path / "out", LIMITS)
    with Image.open(result["thumbnail"]) as thumb:
        assert thumb.mode == "RGBA"
        assert pixel(thumb, 0, 0)[3] == 0


def test_a_small_image_is_not_upscaled(tmp_path: Path) -> None:
    src = tmp_path / "small.jpg"
    Image.new("RGB", (100, 50), (1, 2, 3)).save(src)
    assert make_thumbnail(src, tmp_path / "out", LIMITS)["width"] == 100


def test_a_truncated_jpeg_is_corrupt(photo_12mp: Path, tmp_path: Path) -> None:
    src = samples.truncated(photo_12mp, tmp_path / "cut.jpg")
    with pytest.raises(MediaError) as raised:
        make_thumbnail(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "corrupt"
    assert "truncated" in raised.value.message


def test_random_bytes_are_corrupt(tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        make_thumbnail(samples.random_bytes(tmp_path / "noise.jpg"), tmp_path / "out", LIMITS)
    assert raised.value.code == "corrupt"


def test_a_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    src = samples.png_bomb(tmp_path / "bomb.png")  # claims 100000 x 100000
    with pytest.raises(MediaError) as raised:
        make_thumbnail(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "too_large"


def test_an_image_over_pillows_warning_threshold_is_too_large(tmp_path: Path) -> None:
    src = samples.png_bomb(tmp_path / "big.png", width=10_000, height=9_500)  # 95 MP
    with pytest.raises(MediaError) as raised:
        make_thumbnail(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "too_large"


def test_the_explicit_pixel_cap_names_the_numbers(photo_12mp: Path, tmp_path: Path) -> None:
    with pytest.raises(MediaError) as raised:
        make_thumbnail(photo_12mp, tmp_path / "out", MediaLimits(max_pixels=10_000_000))
    assert raised.value.code == "too_large"
    assert "4000x3000" in raised.value.message and "10000000" in raised.value.message


def test_a_jpeg_repeating_its_scans_is_refused_before_decoding(tmp_path: Path) -> None:
    # 600 scans of 12 bytes each: a pass over all 4 MP per scan if decoded.
    src = samples.jpeg_scan_bomb(tmp_path / "scans.jpg", size=2048, scans=600)
    assert src.stat().st_size < 100_000
    with pytest.raises(MediaError) as raised:
        make_thumbnail(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "too_large" and "scans" in raised.value.message
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_real_progressive_and_baseline_jpegs_have_few_scans(tmp_path: Path) -> None:
    image = Image.new("RGB", (900, 600), (200, 40, 40))
    baseline, progressive = tmp_path / "baseline.jpg", tmp_path / "progressive.jpg"
    image.save(baseline, "JPEG")
    image.save(progressive, "JPEG", progressive=True)
    assert jpeg_scans(baseline, MAX_JPEG_SCANS) == 1
    assert jpeg_scans(progressive, MAX_JPEG_SCANS) == 10  # libjpeg's standard script
    assert jpeg_scans(samples.jpeg_scan_bomb(tmp_path / "b.jpg", scans=MAX_JPEG_SCANS), 10**6) == (
        MAX_JPEG_SCANS + 1
    )
    assert make_thumbnail(progressive, tmp_path / "out", LIMITS)["width"] == 512
    # Exactly at the limit still decodes.
    at_limit = samples.jpeg_scan_bomb(tmp_path / "at.jpg", scans=MAX_JPEG_SCANS - 1)
    assert make_thumbnail(at_limit, tmp_path / "out2", LIMITS)["width"] == 512


@pytest.mark.parametrize(
    ("name", "head"),
    [("heic", b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00"), ("tiff", b"II*\x00\x08\x00\x00\x00")],
)
def test_formats_outside_the_allow_list_are_unsupported(
    tmp_path: Path, name: str, head: bytes
) -> None:
    src = tmp_path / f"photo.{name}"
    src.write_bytes(head + b"\x00" * 512)
    with pytest.raises(MediaError) as raised:
        make_thumbnail(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "unsupported"


def test_a_real_tiff_is_unsupported_not_decoded(tmp_path: Path) -> None:
    src = tmp_path / "scan.tiff"
    Image.new("RGB", (64, 64)).save(src, "TIFF")
    with pytest.raises(MediaError) as raised:
        make_thumbnail(src, tmp_path / "out", LIMITS)
    assert raised.value.code == "unsupported"


def test_a_failure_leaves_no_output_or_temporary_file(photo_12mp: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(MediaError):
        make_thumbnail(samples.truncated(photo_12mp, tmp_path / "cut.jpg"), out, LIMITS)
    assert list(out.iterdir()) == []
