"""Reading images from manifests that strangers may hand us.

Paths must stay under the image root (no absolute paths, no '..', no symlink out)
unless the user allows it; PIL's decompression-bomb guard stays on (its warning is
treated as an error); EXIF orientation is applied; CMYK, palette and 16-bit images
are converted to 8-bit RGB.
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from ..errors import FlowclipError
from ..shards import MAX_IMAGE_BYTES, MEMBER_SEP, is_url, join, read_member, split_member_path


class BadImage(Exception):
    """An item that cannot be encoded; the message is the reason in the failures table."""


def resolve_image_path(image_root: str, rel: str, allow_outside_root: bool = False) -> str:
    """The real path of rel under the root (refused outside it unless allowed); a member
    of a shard under the root (`test/0.tar/s01.jpg`) as its shard's real path, MEMBER_SEP
    and the member's name."""
    if is_url(image_root):  # only archive members are read at a URL; nothing outside the root
        if os.path.isabs(rel) or ".." in rel.replace("\\", "/").split("/"):
            raise BadImage("a path outside the image root ('..' or absolute) at a URL root")
        at_url = split_member_path(image_root, rel)
        if at_url is None:
            raise BadImage("not a member of a .tar or .zip archive under the URL root (only those are read at a URL)")
        return join(image_root, at_url[0]) + MEMBER_SEP + at_url[1]
    in_shard = None if os.path.isabs(rel) else split_member_path(image_root, rel)
    if in_shard is not None:
        return resolve_image_path(image_root, in_shard[0], allow_outside_root) + MEMBER_SEP + in_shard[1]
    root_real = os.path.realpath(image_root)
    if os.path.isabs(rel) and not allow_outside_root:
        raise BadImage("absolute path refused (pass --allow-outside-root to allow)")
    path = os.path.join(image_root, rel)
    real = os.path.realpath(path)
    if not allow_outside_root and os.path.commonpath([real, root_real]) != root_real:
        raise BadImage("path escapes the image root ('..' or a symlink; pass --allow-outside-root to allow)")
    return real


def to_rgb(im: Image.Image) -> Image.Image:
    """8-bit RGB. Single-channel images of more bits are scaled by their type's range:
    16-bit by 65535; 32-bit integers by 255 or, when larger values occur, 65535; float
    images by 1 when their values lie in [0, 1] (the usual convention), else by 255.
    A float image with NaN or values outside [0, 255] has no safe reading: refused."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(im, dtype=np.float64)
        if im.mode == "F":
            if not np.isfinite(arr).all() or arr.min() < 0 or arr.max() > 255:
                raise BadImage(
                    f"float image with values outside [0, 255] or NaN "
                    f"(range {np.nanmin(arr):.3g} to {np.nanmax(arr):.3g}); convert it to 8-bit first"
                )
            hi = 1.0 if arr.max() <= 1.0 else 255.0
        else:
            hi = 65535.0 if im.mode.startswith("I;16") or arr.max() > 255 else 255.0
        arr = np.clip(arr / hi * 255.0 + 0.5, 0, 255).astype(np.uint8)
        im = Image.fromarray(arr, mode="L")
    return im.convert("RGB")


def load_npy_frame(path: str) -> Image.Image:
    """A video frame stored as a NumPy array: [H, W, 3] uint8 in BGR order, as OpenCV
    writes frames (EqBen's YouCook2 images; its process_img_npy reverses the channels
    the same way). Read without pickle."""
    import numpy as np

    try:
        a = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise BadImage("missing file")
    except (OSError, ValueError) as e:
        raise BadImage(f"not a NumPy array file np.load reads without pickle ({e})")
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
        raise BadImage(f"a .npy image must be [H, W, 3] uint8 (BGR), found {a.dtype} {list(a.shape)}")
    return Image.fromarray(np.ascontiguousarray(a[:, :, ::-1]), "RGB")


def member_bytes(ref: str) -> bytes:
    """The bytes of a shard member named as resolve_image_path names it."""
    shard, _, member = ref.partition(MEMBER_SEP)
    try:
        return read_member(shard, member, MAX_IMAGE_BYTES)
    except FlowclipError as e:
        raise BadImage(str(e))
    except FileNotFoundError:
        raise BadImage("missing shard")
    except (OSError, ValueError) as e:
        raise BadImage(f"unreadable shard member ({e})")


def load_image(path: str, crop=None) -> Image.Image:
    """Decode fully (so a truncated file fails here, not later) and return 8-bit RGB; a
    shard member decodes from its bytes exactly as the same file would."""
    if path.lower().endswith(".npy") and MEMBER_SEP not in path:
        return _crop(load_npy_frame(path), crop)
    source = io.BytesIO(member_bytes(path)) if MEMBER_SEP in path else path
    if isinstance(source, io.BytesIO) and not source.getbuffer().nbytes:
        raise BadImage("zero-byte shard member")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(source) as f:
                f.load()
                im = to_rgb(ImageOps.exif_transpose(f))
    except FileNotFoundError:
        raise BadImage("missing file")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise BadImage(f"decompression bomb refused ({e})")
    except UnidentifiedImageError:
        size = os.path.getsize(path) if isinstance(source, str) and os.path.exists(path) else -1
        raise BadImage("zero-byte file" if size == 0 else "not an image PIL can read")
    except (OSError, ValueError, SyntaxError) as e:
        raise BadImage(f"unreadable image ({e})")
    return _crop(im, crop)


def _crop(im: Image.Image, crop) -> Image.Image:
    if crop is not None:
        x, y, w, h = crop
        if x >= im.width or y >= im.height or x + w <= 0 or y + h <= 0:
            raise BadImage(f"crop {list(crop)} lies outside the {im.width}x{im.height} image")
        im = im.crop((int(round(x)), int(round(y)), int(round(x + w)), int(round(y + h))))
    return im
