"""Decoding a batch of encoded images: in threads, at a reduced scale when a size is asked, on a GPU.

The default (no ``size``) gives exactly :func:`torch_tfrecord.vision.decode_image`'s pixels.
With a size, a JPEG is decoded at the smallest libjpeg-turbo DCT scale of :data:`DCT_SCALES` (1/8,
1/4, 1/2, 1) that still covers the kept region with at least the output's pixels, then cropped and
resized (bilinear, antialiased). simplejpeg does the scaled decode when installed (it releases the
GIL); Pillow's ``draft`` otherwise. The region comes from a generator seeded per record (see
:func:`seeded`). Where the ``_jpeg`` extension is built (:mod:`.image_roi`) and simplejpeg is
installed, a batch's JPEGs are decoded and resized in one native call that decodes only each kept
region and resizes it into the batch, with the same pixels.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F

from ..support.seeds import mix_seed
from . import image_roi
from .spec import Image
from .tf_jpeg import (
    decode_jpeg_crop_fast,
    decode_jpeg_fast,
    fast_dct_library,
    simplejpeg_module,
)

__all__ = ["UndecodableImage", "crop_box", "decode_images", "reduced_decode", "seeded"]

Box = tuple[int, int, int, int]  # top, left, height, width
RecordIds = Sequence[int] | npt.NDArray[np.int64]

# (seed, record ids) of the batch being decoded, set by the dataset around a decode so that
# random regions depend on the record, not on which worker or batch decodes it.
_SEEDS: contextvars.ContextVar[tuple[int, RecordIds] | None] = contextvars.ContextVar(
    "torch_tfrecord_image_seeds", default=None
)


class UndecodableImage(Exception):
    """Image ``index`` of a batch could not be decoded; ``cause`` is the codec's error."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"image {index}: {cause}")
        self.index = index
        self.cause = cause


@contextlib.contextmanager
def seeded(seed: int, record_ids: RecordIds) -> Iterator[None]:
    """Random regions of the images decoded inside come from ``mix_seed(seed, record_id)``."""
    token = _SEEDS.set((seed, record_ids))
    try:
        yield
    finally:
        _SEEDS.reset(token)


def _generators(count: int) -> list[torch.Generator | None]:
    current = _SEEDS.get()
    if current is None or len(current[1]) != count:
        return [None] * count  # outside a dataset: torch's global RNG, like torchvision's transforms
    seed, ids = current
    return [torch.Generator().manual_seed(mix_seed(seed, int(record_id))) for record_id in ids]


def crop_box(height: int, width: int, spec: Image, generator: torch.Generator | None = None) -> Box:
    """The region of a ``height`` x ``width`` image that ``spec`` resizes to its size.

    ``"random"`` draws as torchvision's ``RandomResizedCrop.get_params`` does (10 tries, then the
    centred region of the nearest allowed ratio), from ``generator``.
    """
    assert spec.size is not None
    out_h, out_w = spec.size  # type: ignore[misc]
    if spec.crop == "resize":
        return 0, 0, height, width
    if spec.crop == "center":
        target = out_w / out_h
        w = min(width, round(height * target))
        h = min(height, round(width / target))
        return (height - h) // 2, (width - w) // 2, max(h, 1), max(w, 1)
    area = height * width
    log_ratio = torch.log(torch.tensor(spec.ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(*spec.scale, generator=generator).item()
        aspect = math.exp(torch.empty(1).uniform_(*log_ratio.tolist(), generator=generator).item())
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,), generator=generator).item())
            left = int(torch.randint(0, width - w + 1, (1,), generator=generator).item())
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < spec.ratio[0]:
        w, h = width, round(width / spec.ratio[0])
    elif in_ratio > spec.ratio[1]:
        h, w = height, round(height * spec.ratio[1])
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def resize(
    image: torch.Tensor, box: tuple[float, float, float, float], size: tuple[int, int]
) -> torch.Tensor:
    """``image`` (uint8 CHW, or NCHW: each image the same region)'s region ``box`` (top, left,
    height, width, in its pixels, fractional edges rounded to whole pixels) resized to ``size``,
    bilinear and antialiased."""
    top, left, h, w = box
    height, width = image.shape[-2:]
    y0, x0 = max(0, round(top)), max(0, round(left))
    y1, x1 = min(height, max(y0 + 1, round(top + h))), min(width, max(x0 + 1, round(left + w)))
    region = image[..., y0:y1, x0:x1]
    if tuple(region.shape[-2:]) == tuple(size):
        return region.contiguous()
    batch = region if region.dim() == 4 else region[None]
    if region.device.type == "cpu":
        # uint8 in, uint8 out: torch's vectorised uint8 path (channels-last), no float copy.
        resized = F.interpolate(batch, size=size, mode="bilinear", antialias=True, align_corners=False)
    else:
        floats = F.interpolate(batch.float(), size=size, mode="bilinear", antialias=True, align_corners=False)
        resized = floats.round_().clamp_(0, 255).to(torch.uint8)
    return resized if region.dim() == 4 else resized[0]


_simplejpeg = simplejpeg_module  # the scaled decode's library (None: Pillow's draft); tests patch it


def _is_jpeg(data: bytes | memoryview) -> bool:
    return bytes(data[:3]) == b"\xff\xd8\xff"


def _cut_short(data: bytes) -> ValueError | None:
    """nvJPEG decodes a JPEG cut short without a word, where libjpeg warns (an error here): one
    with no end-of-image marker after its last scan's start is refused before it. (Scan data
    never holds a marker: an 0xFF there is followed by 0x00 or a restart marker.)"""
    if data.endswith(b"\xff\xd9"):  # nearly every JPEG: no search
        return None
    last_scan = data.rfind(b"\xff\xda")
    if last_scan < 0 or data.rfind(b"\xff\xd9") < last_scan:
        return ValueError("Premature end of JPEG file: no end-of-image marker after its last scan")
    return None


# The DCT scales (n/8) a sized decode uses: those whose inverse DCT libjpeg-turbo runs in SIMD.
# At 5/8 to 7/8 its IDCTs are plain C, and 4:2:0 chroma is decoded with 10x10 to 14x14 ones:
# decoding a region at 7/8 took 1.4x the time of decoding it whole and resizing the larger
# region (one core, 640x480 photos; 6/8 1.1x, 5/8 level); 3/8 is level with 4/8.
DCT_SCALES = (1, 2, 4, 8)


def _scale(height: int, width: int, box: Box, size: tuple[int, int]) -> int:
    """The DCT scale (n/8, of :data:`DCT_SCALES`) to decode the whole image at so that ``box`` keeps
    at least ``size`` of its pixels: the smallest that gives them."""
    _, _, h, w = box
    need_h = min(math.ceil(height * size[0] / h), height)
    need_w = min(math.ceil(width * size[1] / w), width)
    for num in DCT_SCALES:
        if _scaled(height, num) >= need_h and _scaled(width, num) >= need_w:
            return num
    return 8


def _scaled(size: int, num: int) -> int:
    """A side decoded at DCT scale num/8 (libjpeg rounds up)."""
    return -(-size * num // 8)


def _needed(height: int, width: int, box: Box, size: tuple[int, int]) -> tuple[int, int]:
    """The least size to ask a decoder that decodes at the smallest DCT scale giving it (the
    ``_jpeg`` extension, simplejpeg, PyTurboJPEG) for :func:`_scale`'s scale: that scale's size."""
    num = _scale(height, width, box, size)
    return _scaled(height, num), _scaled(width, num)


def _drafted(height: int, width: int, box: Box, size: tuple[int, int]) -> tuple[int, int]:
    """The size to ask Pillow's ``draft`` for :func:`_scale`'s scale: ``draft`` takes the largest
    of 1/8, 1/4, 1/2 whose divisor fits ``image // asked`` on both sides, so the sizes rounded down."""
    num = _scale(height, width, box, size)
    return max(1, height * num // 8), max(1, width * num // 8)


def reduced_decode(
    data: bytes, spec: Image, generator: torch.Generator | None = None, box: Box | None = None
) -> torch.Tensor:
    """One image decoded to ``spec.size`` on the CPU (see the module's docstring); its region is
    ``box`` when given, else drawn by :func:`crop_box` from ``generator``."""
    from .image import decode_image

    assert spec.size is not None
    out_h, out_w = spec.size  # type: ignore[misc]
    if not _is_jpeg(data):
        full = decode_image(data, spec.mode)
        height, width = full.shape[-2:]
        return resize(full, box or crop_box(height, width, spec, generator), (out_h, out_w))
    simplejpeg = fast_dct_library() if spec.dct == "fast" else _simplejpeg()
    if simplejpeg is not None:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
        top, left, h, w = box or crop_box(height, width, spec, generator)
        need_h, need_w = _needed(height, width, (top, left, h, w), (out_h, out_w))
        if spec.dct == "fast" and spec.crop != "resize":
            array, region = decode_jpeg_crop_fast(data, spec.mode, (top, left, h, w), need_h, need_w)
            return resize(torch.from_numpy(array).permute(2, 0, 1), region, (out_h, out_w))
        if spec.dct == "fast":
            array = decode_jpeg_fast(data, spec.mode, need_h, need_w)
        else:
            colorspace = "RGB" if spec.mode == "RGB" else "GRAY"
            array = simplejpeg.decode_jpeg(data, colorspace=colorspace, min_height=need_h, min_width=need_w)
        scaled = torch.from_numpy(array).permute(2, 0, 1)  # a channels-last view
    else:
        import PIL.Image

        with PIL.Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            top, left, h, w = box or crop_box(height, width, spec, generator)
            draft_h, draft_w = _drafted(height, width, (top, left, h, w), (out_h, out_w))
            image.draft(spec.mode, (draft_w, draft_h))
            array = np.asarray(image.convert(spec.mode))
        if array.ndim == 2:
            array = array[:, :, None]
        scaled = torch.from_numpy(array.copy()).permute(2, 0, 1)
    fy, fx = scaled.shape[-2] / height, scaled.shape[-1] / width
    return resize(scaled, (top * fy, left * fx, h * fy, w * fx), (out_h, out_w))


_POOL: tuple[int, ThreadPoolExecutor] | None = None


def _threads() -> int:
    """Threads per decoding process: the cores this process may use, shared among DataLoader workers."""
    forced = os.environ.get("TORCH_TFRECORD_IMAGE_THREADS")
    if forced:
        return max(1, int(forced))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    info = torch.utils.data.get_worker_info()
    return max(1, cores // (info.num_workers if info is not None else 1))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():  # a forked worker does not inherit the threads
        _POOL = (os.getpid(), ThreadPoolExecutor(_threads(), thread_name_prefix="tt-image"))
    return _POOL[1]


def _each(indices: Sequence[int], decode_one: Callable[[int], torch.Tensor]) -> list[torch.Tensor]:
    """``decode_one`` of each index, on the pool; the first index that fails raises, named."""

    def guarded(i: int) -> torch.Tensor:
        try:
            return decode_one(i)
        except ImportError:  # a library missing, not a bad image: the error names the extra
            raise
        except Exception as error:  # the codec's own error type: the caller names the record
            raise UndecodableImage(i, error) from error

    if len(indices) < 2 or _threads() < 2:
        return [guarded(i) for i in indices]
    return list(_pool().map(guarded, indices))


def decode_images(encoded: Sequence[bytes], spec: Image) -> list[torch.Tensor] | torch.Tensor:
    """A batch's images as ``spec`` asks: a list of CHW tensors, or one ``[B, C, H, W]``
    tensor with ``spec.size``.

    Raises:
        UndecodableImage: naming the index of the first image that does not decode.
    """
    from .image import decode_image

    if spec.device != "cpu":
        return _decode_on_gpu(encoded, spec)
    if spec.size is None:
        return _each(range(len(encoded)), lambda i: decode_image(encoded[i], spec.mode, spec.dct))
    # Only random crops draw: the other crops need no generator per image.
    generators: list[torch.Generator | None] = [None] * len(encoded)
    if spec.crop == "random":
        generators = _generators(len(encoded))
    out_h, out_w = spec.size  # type: ignore[misc]
    channels = 3 if spec.mode == "RGB" else 1
    out = torch.empty((len(encoded), channels, out_h, out_w), dtype=torch.uint8)
    if torch.utils.data.get_worker_info() is not None:
        # Decoded straight into shared memory: the batch goes to the main process with no copy.
        out.share_memory_()  # type: ignore[no-untyped-call]

    if _regions_apply(spec):
        _decode_regions_into(out, encoded, spec, generators)
        return out

    def into(i: int) -> torch.Tensor:
        out[i] = reduced_decode(encoded[i], spec, generators[i])
        return out[i]

    _each(range(len(encoded)), into)
    return out


def _regions_apply(spec: Image) -> bool:
    """Whether the batch's JPEGs go through :mod:`.image_roi`: where it gives the pixels of the path
    without it (simplejpeg's scaled decode; ``decode_and_crop_jpeg``'s for ``dct="fast"`` crops,
    with no PyTurboJPEG: only CMYK JPEGs, which take the Python path, need it there)."""
    if not image_roi.available():
        image_roi.warn_unavailable()
        return False
    return spec.dct == "fast" or _simplejpeg() is not None


def _decode_regions_into(
    out: torch.Tensor, encoded: Sequence[bytes], spec: Image, generators: list[torch.Generator | None]
) -> None:
    """``out[i]`` = image i at ``spec.size``: the JPEGs' regions decoded and resized into ``out`` in
    one native call (on a CPU without the SIMD resize, decoded in one call and resized by torch);
    other formats (and CMYK JPEGs) as :func:`reduced_decode` decodes them."""
    size: tuple[int, int] = spec.size  # type: ignore[assignment]
    jpegs = [i for i, data in enumerate(encoded) if _is_jpeg(data)]
    boxes: dict[int, Box] = {}
    regions: list[image_roi.Region] = []
    failed: dict[int, ValueError] = {}
    for i, header in zip(jpegs, image_roi.read_sizes([encoded[i] for i in jpegs]), strict=True):
        if isinstance(header, ValueError):
            failed[i] = header
            continue
        box = boxes[i] = crop_box(*header, spec, generators[i])
        regions.append((*box, *_needed(*header, box, size)))
    fast, slots = spec.dct == "fast", list(boxes)
    tf_crop = fast and spec.crop != "resize"  # TensorFlow's decode_and_crop_jpeg pixels
    kept, grey = [encoded[i] for i in slots], spec.mode == "L"
    native: set[int] = set()
    # No SIMD resize on this CPU: the regions come back and torch resizes each (on the pool, below).
    target = (out, slots) if image_roi.resizes_fast() else (None, None)
    options = (grey, fast, _threads(), tf_crop, *target, spec.verify == "full")
    done = image_roi.decode_regions(kept, regions, *options)
    decoded: dict[int, torch.Tensor] = {}
    for i, result in zip(slots, done, strict=True):
        if isinstance(result, ValueError):
            failed[i] = result
        elif isinstance(result, torch.Tensor):
            decoded[i] = result
        elif result:
            native.add(i)
    first_failed = min(failed, default=len(encoded))
    # Regions to resize here, not JPEGs, and CMYK JPEGs (with the box already drawn): the Python
    # path, up to the first bad image.
    python_path = [i for i in range(first_failed) if i not in native]

    def into(i: int) -> torch.Tensor:
        region = decoded.get(i)
        if region is not None:
            out[i] = resize(region, (0, 0, *region.shape[-2:]), size)
        else:
            out[i] = reduced_decode(encoded[i], spec, generators[i], boxes.get(i))
        return out[i]

    _each(python_path, into)
    if failed:
        raise UndecodableImage(first_failed, failed[first_failed])


def _decode_on_gpu(encoded: Sequence[bytes], spec: Image) -> list[torch.Tensor] | torch.Tensor:
    """JPEGs decoded by nvJPEG in one batched call, other formats on the CPU then moved."""
    from .image import decode_image, image_backend

    if image_backend() != "torchvision" or not torch.cuda.is_available():
        raise RuntimeError(f"Image(device={spec.device!r}) needs torchvision and a CUDA device")
    import torchvision.io as tvio

    device = torch.device(spec.device)
    read_mode = tvio.ImageReadMode.RGB if spec.mode == "RGB" else tvio.ImageReadMode.GRAY
    if spec.mode == "unchanged":
        read_mode = tvio.ImageReadMode.UNCHANGED
    jpegs = [i for i, data in enumerate(encoded) if _is_jpeg(data)]
    for i in jpegs:
        cut = _cut_short(bytes(encoded[i]))
        if cut is not None:
            raise UndecodableImage(i, cut)
    images: list[torch.Tensor | None] = [None] * len(encoded)
    if jpegs:
        tensors = [torch.frombuffer(bytearray(encoded[i]), dtype=torch.uint8) for i in jpegs]
        try:
            decoded = tvio.decode_jpeg(tensors, mode=read_mode, device=device)
        except RuntimeError:  # one bad image fails the batch call: find which, one at a time
            decoded = []
            for i, tensor in zip(jpegs, tensors, strict=True):
                try:
                    decoded.append(tvio.decode_jpeg(tensor, mode=read_mode, device=device))
                except RuntimeError as error:
                    raise UndecodableImage(i, error) from error
        for i, image in zip(jpegs, decoded, strict=True):
            images[i] = image
    for i, data in enumerate(encoded):
        if images[i] is None:
            try:
                images[i] = decode_image(data, spec.mode).to(device, non_blocking=True)
            except Exception as error:
                raise UndecodableImage(i, error) from error
    full = [image for image in images if image is not None]
    if spec.size is None:
        return full
    size: tuple[int, int] = spec.size  # type: ignore[assignment]
    if spec.crop == "random":
        generators = _generators(len(full))
        return torch.stack(
            [
                resize(image, crop_box(image.shape[-2], image.shape[-1], spec, generator), size)
                for image, generator in zip(full, generators, strict=True)
            ]
        )
    # A resize or center crop depends on the image's size alone: one resize per group of equal sizes.
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, image in enumerate(full):
        groups.setdefault(tuple(image.shape), []).append(i)
    out = torch.empty((len(full), full[0].shape[0], *size), dtype=torch.uint8, device=device)
    for shape, members in groups.items():
        stacked = torch.stack([full[i] for i in members])
        out[members] = resize(stacked, crop_box(shape[-2], shape[-1], spec), size)
    return out
