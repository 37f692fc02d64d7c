"""The Image feature spec: an encoded image decoded to a uint8 tensor, whole, resized or cropped.

A frozen dataclass that rejects nonsense when it is made; re-exported by :mod:`.spec` beside the
other feature specs.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from ..errors import SpecError

__all__ = ["Image"]


@dataclasses.dataclass(frozen=True)
class Image:
    """A bytes feature holding an encoded image (JPEG, PNG, ...), decoded to a uint8 CHW tensor.

    Decoded with torchvision.io when torchvision imports, else with Pillow; the pixels are the
    same either way. The images of a batch are decoded by a pool of threads (the codecs release
    the GIL), with the same pixels as one at a time.

    With ``size``, each image comes out ``size`` pixels large and a batch's images as one
    ``[B, C, H, W]`` tensor. JPEGs are then decoded at a reduced scale in the DCT domain
    (libjpeg-turbo's 1/2, 1/4, 1/8: simplejpeg when installed, else Pillow's ``draft``) large
    enough for the region kept, and resized (bilinear, antialiased): a few times faster than a
    full decode, its pixels close to (not equal to) full decode + resize. Where the optional
    ``_jpeg`` extension is built (libjpeg-turbo), only the region kept is decoded, with the
    same pixels.

    Args:
        mode: ``"RGB"`` (3 channels), ``"L"`` (1 channel, grey) or ``"unchanged"``.
        size: ``None`` (the full-resolution image, the default), or the output ``(height,
            width)`` (an int: square).
        crop: with ``size``, the region resized to it: ``"resize"`` the whole image (its aspect
            ratio not kept), ``"center"`` the largest centred region of the output's aspect
            ratio (Resize + CenterCrop), ``"random"`` a random region as torchvision's
            ``RandomResizedCrop(size, scale, ratio)`` draws it, from a generator seeded per
            record by (seed, epoch, record id) in ``TFRecordDataset``: the same crops with any
            number of workers, new ones each epoch.
        scale: the area range of random regions, as a fraction of the image.
        ratio: the aspect ratio (width / height) range of random regions.
        device: ``"cpu"``, or ``"cuda"`` (``"cuda:N"``) to decode JPEGs on the GPU with
            torchvision's nvJPEG, a batch per call; use it in the main process
            (``num_workers=0``): CUDA does not run in forked DataLoader workers.
        dct: the inverse DCT of JPEGs. ``"accurate"`` (the default): libjpeg's accurate integer
            DCT, TensorFlow's ``decode_jpeg(dct_method="INTEGER_ACCURATE")``. ``"fast"``:
            TensorFlow's default (``INTEGER_FAST``, what ``tfds.as_numpy`` and TF pipelines
            give), value for value, whole, with ``size`` at a reduced scale (``ratio=``) and
            with crops (``decode_and_crop_jpeg``); it needs simplejpeg (the ``fastjpeg``
            extra) and the CPU. Other formats decode the same either way.
        verify: how much of a JPEG a ``"center"`` or ``"random"`` crop checks. ``"crop"`` (the
            default): decoding stops after the crop's last row, as TensorFlow's
            ``decode_and_crop_jpeg`` and DALI stop, so a JPEG damaged only below its crop
            decodes without an error, to the crop's intact pixels. ``"full"``: the rows below
            are entropy-decoded too, so damage anywhere fails the image as a whole decode does.
            The pixels are the same either way. Resizes, progressive JPEGs (whose every scan
            holds every row), other formats, JPEGs without the ``_jpeg`` extension and the GPU
            (nvJPEG) are decoded whole, so checked whole, either way.
    """

    mode: Literal["RGB", "L", "unchanged"] = "RGB"
    size: int | tuple[int, int] | None = None
    crop: Literal["resize", "center", "random"] = "resize"
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    device: str = "cpu"
    dct: Literal["accurate", "fast"] = "accurate"
    verify: Literal["crop", "full"] = "crop"

    def __post_init__(self) -> None:
        if self.mode not in ("RGB", "L", "unchanged"):
            raise SpecError(f"Image mode must be 'RGB', 'L' or 'unchanged', got {self.mode!r}")
        if self.size is not None:
            size = (self.size, self.size) if isinstance(self.size, int) else tuple(self.size)
            if len(size) != 2 or not all(isinstance(d, int) and d > 0 for d in size):
                raise SpecError(f"Image size must be a positive int or (height, width), got {self.size!r}")
            object.__setattr__(self, "size", size)
            if self.mode == "unchanged":
                raise SpecError("Image size needs mode 'RGB' or 'L' (images of one batch share a shape)")
        if self.crop not in ("resize", "center", "random"):
            raise SpecError(f"Image crop must be 'resize', 'center' or 'random', got {self.crop!r}")
        if self.crop != "resize" and self.size is None:
            raise SpecError(f"Image crop={self.crop!r} needs a size")
        for name, (low, high) in (("scale", self.scale), ("ratio", self.ratio)):
            if not 0 < low <= high or (name == "scale" and high > 1):
                raise SpecError(f"Image {name} must be a range 0 < low <= high, got {(low, high)!r}")
        object.__setattr__(self, "scale", (float(self.scale[0]), float(self.scale[1])))
        object.__setattr__(self, "ratio", (float(self.ratio[0]), float(self.ratio[1])))
        if not (self.device == "cpu" or self.device == "cuda" or self.device.startswith("cuda:")):
            raise SpecError(f"Image device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.dct not in ("accurate", "fast"):
            raise SpecError(f"Image dct must be 'accurate' or 'fast', got {self.dct!r}")
        if self.dct == "fast" and self.device != "cpu":
            raise SpecError("Image dct='fast' decodes on the CPU: nvJPEG has only its own DCT")
        if self.verify not in ("crop", "full"):
            raise SpecError(f"Image verify must be 'crop' or 'full', got {self.verify!r}")

    def __repr__(self) -> str:
        options = [f"mode={self.mode!r}"]
        if self.size is not None:
            options += [f"size={self.size!r}", f"crop={self.crop!r}"]
            if self.crop == "random":
                options += [f"scale={self.scale!r}", f"ratio={self.ratio!r}"]
        if self.device != "cpu":
            options.append(f"device={self.device!r}")
        if self.dct != "accurate":
            options.append(f"dct={self.dct!r}")
        if self.verify != "crop":
            options.append(f"verify={self.verify!r}")
        return f"tt.Image({', '.join(options)})"
