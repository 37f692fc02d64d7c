"""The native resize (codec/_resize.c through image_roi): torch's uint8 antialiased bilinear byte for
byte (every axis up, down or kept, 1 to many taps, 1-pixel sides, RGB and grey), and the batch
path that uses it: one native call decodes and resizes a batch into the output, no Python per image."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from test_image_roi import photo

import torch_tfrecord as tt
from torch_tfrecord.codec import image_batch, image_roi
from torch_tfrecord.support import extension

pytestmark = pytest.mark.skipif(
    not image_roi.available(),
    reason=f"the _jpeg extension {extension.unavailable(image_roi.load_error)} "
    "(setup.py builds it where libjpeg-turbo's headers are: apt-get install libjpeg62-turbo-dev)",
)


def torch_resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """What image_batch.resize does with a whole region: a copy at the same size, else torch's
    uint8 F.interpolate on the channels-last view."""
    if tuple(image.shape[-2:]) == size:
        return image.clone()
    return F.interpolate(image[None], size=size, mode="bilinear", antialias=True, align_corners=False)[0]


def channels_last(height: int, width: int, channels: int, seed: int, flat: bool = False) -> torch.Tensor:
    """A [C, H, W] view of HWC pixels, as the decoder hands them over; ``flat``: only 0 and 255,
    where rounding and clamping matter most."""
    pixels = torch.randint(
        0, 256, (height, width, channels), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )
    if flat:
        pixels = pixels // 128 * 255
    return pixels.permute(2, 0, 1)


sides = st.integers(1, 90)
# "simd": the loops this CPU runs (AVX2 on x86-64 here); "portable": those of CPUs without it.
LOOPS = pytest.mark.parametrize("loops", ["simd", "portable"])


@contextlib.contextmanager
def using(loops: str) -> Iterator[None]:
    assert image_roi.compiled is not None
    before = image_roi.compiled.portable(loops == "portable")
    try:
        yield
    finally:
        image_roi.compiled.portable(before)


@LOOPS
@settings(max_examples=400, deadline=None)
@given(
    height=sides,
    width=sides,
    out_height=sides,
    out_width=sides,
    channels=st.sampled_from([1, 3]),
    keep=st.sampled_from(["none", "height", "width"]),
    seed=st.integers(0, 2**31),
    flat=st.booleans(),
)
def test_the_resize_is_torchs_byte_for_byte(
    loops: str,
    height: int,
    width: int,
    out_height: int,
    out_width: int,
    channels: int,
    keep: str,
    seed: int,
    flat: bool,
) -> None:
    out_height = height if keep == "height" else out_height
    out_width = width if keep == "width" else out_width
    image = channels_last(height, width, channels, seed, flat)
    got = torch.empty((channels, out_height, out_width), dtype=torch.uint8)
    with using(loops):
        image_roi.resize_into(image, got)
    assert torch.equal(got, torch_resize(image, (out_height, out_width)))


@LOOPS
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize(
    ("height", "width"),
    [(240, 320), (480, 640), (224, 224), (224, 300), (300, 224), (97, 61), (1, 500), (500, 1), (1000, 13)],
)
def test_the_benchmarks_sizes_and_extremes_are_torchs(
    loops: str, height: int, width: int, channels: int
) -> None:
    """Scale 1/2 of a 640x480 JPEG (the benchmark's), whole images, one axis kept, strong up- and
    downscales (up to 75 taps an output) and one-pixel sides."""
    for size in [(224, 224), (1, 224), (224, 1), (7, 300)]:
        image = channels_last(height, width, channels, height * width + size[0])
        got = torch.empty((channels, *size), dtype=torch.uint8)
        with using(loops):
            image_roi.resize_into(image, got)
        assert torch.equal(got, torch_resize(image, size)), (height, width, size)


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("crop", ["resize", "center", "random"])
def test_a_batch_is_decoded_and_resized_in_one_native_call(
    monkeypatch: pytest.MonkeyPatch, mode: str, crop: str
) -> None:
    spec = tt.Image(mode, size=(96, 128), crop=crop)  # type: ignore[arg-type]
    encoded = [photo(i, 320 + 16 * i, 240 - 8 * i, subsampling=i % 3) for i in range(8)]
    with image_batch.seeded(5, list(range(8))):
        before = image_batch.decode_images(encoded, spec)  # a warm pool, and today's bytes to compare
    calls: list[int] = []
    decode_regions = image_roi.compiled.decode_regions  # type: ignore[union-attr]

    class Counted:
        resize = image_roi.compiled.resize  # type: ignore[union-attr]
        simd = image_roi.compiled.simd  # type: ignore[union-attr]
        read_sizes = image_roi.compiled.read_sizes  # type: ignore[union-attr]

        @staticmethod
        def decode_regions(*args: object) -> object:
            calls.append(len(args[0]))  # type: ignore[arg-type]
            return decode_regions(*args)

    def no_python_resize(*args: object, **kwargs: object) -> None:
        raise AssertionError("a per-image resize in Python")

    monkeypatch.setattr(image_roi, "compiled", Counted)
    monkeypatch.setattr(image_batch, "resize", no_python_resize)
    monkeypatch.setattr(F, "interpolate", no_python_resize)
    with image_batch.seeded(5, list(range(8))):
        batch = image_batch.decode_images(encoded, spec)
    assert calls == [8]
    assert isinstance(batch, torch.Tensor) and torch.equal(batch, before)
    monkeypatch.undo()
    monkeypatch.setattr(image_roi, "compiled", None)  # the Python path: decode, then image_batch.resize
    with image_batch.seeded(5, list(range(8))):
        assert torch.equal(batch, image_batch.decode_images(encoded, spec))


@pytest.mark.parametrize("crop", ["resize", "random"])
def test_without_the_simd_resize_torch_resizes_each_region(crop: str) -> None:
    """On a CPU without AVX2 the portable loops are slower than torch's resize: the regions are
    decoded in one call and resized by torch, to the same bytes."""
    spec = tt.Image("RGB", size=(96, 128), crop=crop)  # type: ignore[arg-type]
    encoded = [photo(i, 320 + 16 * i, 240 - 8 * i, subsampling=i % 3) for i in range(6)]
    with image_batch.seeded(5, list(range(6))):
        native = image_batch.decode_images(encoded, spec)
    assert image_roi.resizes_fast()
    with using("portable"):
        assert not image_roi.resizes_fast()
        with image_batch.seeded(5, list(range(6))):
            assert torch.equal(image_batch.decode_images(encoded, spec), native)


def test_the_batch_goes_into_shared_memory_in_place() -> None:
    """The output tensor's own memory (a DataLoader worker's shared batch) is written, at the slots."""
    encoded = [photo(i, 160, 120) for i in range(3)]
    out = torch.zeros((4, 3, 32, 40), dtype=torch.uint8).share_memory_()
    regions = [(0, 0, 120, 160, 32, 40)] * 3
    assert image_roi.decode_regions(encoded, regions, False, False, 2, False, out, [3, 0, 2]) == [True] * 3
    assert out[1].eq(0).all() and not out[3].eq(0).all()
    for slot, data in zip([3, 0, 2], encoded, strict=True):
        [region] = image_roi.decode_regions([data], regions[:1], False, False, 1)
        assert isinstance(region, torch.Tensor)
        assert torch.equal(out[slot], torch_resize(region, (32, 40)))


def test_the_call_rejects_a_wrong_output() -> None:
    encoded, regions = [photo(0, 64, 48)], [(0, 0, 48, 64, 8, 8)]
    with pytest.raises(ValueError, match=r"uint8 \[batch, 1, height, width\]"):
        image_roi.decode_regions(
            encoded, regions, True, False, 1, False, torch.zeros((1, 3, 8, 8), dtype=torch.uint8), [0]
        )
    with pytest.raises(IndexError, match="slot 1 of image 0 is outside the output's 1 images"):
        image_roi.decode_regions(
            encoded, regions, False, False, 1, False, torch.zeros((1, 3, 8, 8), dtype=torch.uint8), [1]
        )
    with pytest.raises(ValueError, match="one slot per image"):
        image_roi.decode_regions(
            encoded, regions, False, False, 1, False, torch.zeros((1, 3, 8, 8), dtype=torch.uint8), []
        )
