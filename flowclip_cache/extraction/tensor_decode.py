"""`extract --decode cpu|gpu`: JPEGs decoded by torchvision (libjpeg-turbo on the CPU,
nvJPEG through `torchvision.io.decode_jpeg(device="cuda")` on a GPU) in batches, then
resized, cropped and normalised as tensors on the decoding device.

Its pixels differ from PIL's (nvJPEG's IDCT; a float resize where PIL resizes in 8 bits),
so each decode is its own preprocessing: resolve() writes `decode` into the encoder's
configuration, and a store of it has its own fingerprint, never mixed with a PIL store.

    worker process   read_raw: the file's bytes, its header checked by PIL (format, size
                     against the decompression-bomb limit, EXIF orientation); a JPEG is
                     not decoded here. Other formats, .npy frames and crops decode with
                     PIL as `--decode pil` does (their pixels are PIL's).
    decoding device  to_inputs: the batch's JPEGs decoded together, each turned upright,
                     resized and cropped alone (an image's input never depends on its
                     batch), stacked.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from ..errors import FlowclipError
from ..shards import MAX_IMAGE_BYTES, MEMBER_SEP
from .images import BadImage, load_image, member_bytes

DECODES = ("pil", "cpu", "gpu")
RESIZE_MODES = ("shortest", "squash")  # open_clip's eval resizes this module follows
INTERPOLATIONS = ("bicubic", "bilinear")
REVISION = 1  # bump when the tensor path's arithmetic changes: the fingerprint follows


def decode_config(decode: str, preprocess: dict) -> dict:
    """What the fingerprint records for a torchvision decode (refused for a preprocessing
    this module does not follow)."""
    import torchvision

    if decode not in DECODES[1:]:
        raise FlowclipError(f"unknown decode {decode!r}; use one of {DECODES}")
    if preprocess.get("resize_mode", "shortest") not in RESIZE_MODES:
        raise FlowclipError(
            f"--decode {decode} follows open_clip's {' and '.join(RESIZE_MODES)} resize; this encoder resizes "
            f"{preprocess['resize_mode']!r}: use --decode pil"
        )
    if preprocess.get("interpolation", "bicubic") not in INTERPOLATIONS:
        raise FlowclipError(f"--decode {decode} resizes {INTERPOLATIONS}; this encoder uses "
                            f"{preprocess['interpolation']!r}: use --decode pil")  # fmt: skip
    device = "cuda" if decode == "gpu" else "cpu"
    return {"library": "torchvision", "device": device, "torchvision": torchvision.__version__, "revision": REVISION}


def check_decode_device(config: dict, device: str) -> None:
    """A GPU decode runs on the encoder's GPU: refused, before anything is written, elsewhere."""
    if config.get("decode", {}).get("device") == "cuda" and not str(device).startswith("cuda"):
        raise FlowclipError(f"--decode gpu decodes on the encoder's GPU: pass --device cuda (this run's is {device})")


@dataclass
class RawImage:
    """An image as a worker hands it over: JPEG bytes to decode (with its EXIF orientation)
    or pixels PIL decoded ([3, H, W] uint8)."""

    jpeg: Any = None  # torch uint8 [n_bytes]
    orientation: int = 1
    pixels: Any = None  # torch uint8 [3, H, W]


def read_raw(path: str, crop=None) -> RawImage:
    """The bytes of a JPEG with its header checked, or PIL's pixels for anything else."""
    import torch

    if crop is not None or (path.lower().endswith(".npy") and MEMBER_SEP not in path):
        return RawImage(pixels=_pil_pixels(load_image(path, crop)))
    data = _read_bounded(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as f:  # the header only: nothing decoded
                fmt, mode, orientation = f.format, f.mode, f.getexif().get(0x0112, 1)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise BadImage(f"decompression bomb refused ({e})")
        except Exception:  # not an image, or a header PIL cannot read: PIL's own message
            return RawImage(pixels=_pil_pixels(load_image(path)))
    if fmt != "JPEG" or mode not in ("RGB", "L"):  # CMYK, 12-bit and other formats: PIL's pixels
        return RawImage(pixels=_pil_pixels(load_image(path)))
    if not data.rstrip(b"\x00").endswith(b"\xff\xd9"):  # nvJPEG may decode a cut file silently
        raise BadImage("JPEG without its end marker (truncated); --decode pil reads such files as PIL does")
    return RawImage(jpeg=torch.frombuffer(bytearray(data), dtype=torch.uint8), orientation=int(orientation))


def _read_bounded(path: str) -> bytes:
    if MEMBER_SEP in path:
        return member_bytes(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_IMAGE_BYTES:
            raise BadImage(f"{size} bytes, over the {MAX_IMAGE_BYTES}-byte limit for one image")
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise BadImage("missing file")
    if not data:
        raise BadImage("zero-byte file")
    return data


def _pil_pixels(im: Image.Image):
    import torch

    return torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).contiguous()


def decode_batch(raws: list[RawImage], device: str) -> list:
    """[3, H, W] uint8 tensors on the device, upright; a JPEG the decoder refuses is its
    error's message instead (the batch is decoded again one by one to find it)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    jpegs = [i for i, r in enumerate(raws) if r.jpeg is not None]
    out: list = [r.pixels.to(device) if r.jpeg is None else None for r in raws]
    try:
        decoded = decode_jpeg([raws[i].jpeg for i in jpegs], mode=ImageReadMode.RGB, device=device) if jpegs else []
    except RuntimeError:
        decoded = []
        for i in jpegs:
            try:
                decoded.append(decode_jpeg(raws[i].jpeg, mode=ImageReadMode.RGB, device=device))
            except RuntimeError as e:
                decoded.append(f"torchvision cannot decode this JPEG ({str(e).splitlines()[0]})")
    for i, x in zip(jpegs, decoded):
        out[i] = x if isinstance(x, str) else upright(x, raws[i].orientation)
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return out


def upright(x, orientation: int):
    """The image as PIL's ImageOps.exif_transpose turns it, for EXIF orientations 1-8."""
    import torch

    turn = {
        2: lambda t: t.flip(-1),  # mirrored
        3: lambda t: t.flip(-1, -2),  # 180
        4: lambda t: t.flip(-2),
        5: lambda t: t.transpose(-1, -2),
        6: lambda t: torch.rot90(t, -1, (-2, -1)),  # PIL's ROTATE_270: clockwise
        7: lambda t: t.transpose(-1, -2).flip(-1, -2),
        8: lambda t: torch.rot90(t, 1, (-2, -1)),
    }.get(orientation)
    return turn(x).contiguous() if turn else x


def resized_size(h: int, w: int, size: int, resize_mode: str) -> tuple[int, int]:
    """torchvision's Resize(size) output for an int size (shortest side), or (size, size)."""
    if resize_mode == "squash":
        return size, size
    if w <= h:
        return int(size * h / w), size
    return size, int(size * w / h)


def preprocess_tensor(x, pre: dict):
    """One image ([3, H, W] uint8, any device) as open_clip's eval transform builds its
    input: resize (antialiased, values rounded to 8 bits as PIL's are), centre crop,
    scale to [0, 1], normalise."""
    import torch

    size = int(pre["image_size"])
    h, w = resized_size(x.shape[-2], x.shape[-1], size, pre.get("resize_mode", "shortest"))
    y = torch.nn.functional.interpolate(x[None].float(), size=(h, w), mode=pre.get("interpolation", "bicubic"),
                                        antialias=True, align_corners=False)[0]  # fmt: skip
    y = y.round_().clamp_(0, 255)
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    y = y[:, top : top + size, left : left + size] / 255.0
    mean = torch.tensor(pre["mean"], device=y.device).view(3, 1, 1)
    std = torch.tensor(pre["std"], device=y.device).view(3, 1, 1)
    return (y - mean) / std


def to_inputs(raws: list[RawImage], pre: dict, device: str) -> list:
    """Each image's model input on the device, or the message of why it has none."""
    return [x if isinstance(x, str) else preprocess_tensor(x, pre) for x in decode_batch(raws, device)]
