"""Manifests: Parquet tables whose rows name an image (a path relative to an image
root given at extract time) and the captions scored or trained against it.

Schema version 1 (full description in docs/manifests.md). The file's schema metadata
carries ``flowclip.kind`` and ``flowclip.schema_version``; a table without them is
recognised by its columns. Every kind names its image column and the columns that
hold caption text, so ``extract`` can collect keys from any manifest without knowing
what benchmark it came from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import ManifestError
from .shards import image_file_exists

SCHEMA_VERSION = 1
META_KIND = b"flowclip.kind"
META_VERSION = b"flowclip.schema_version"
META_EXTRA = b"flowclip.meta"  # JSON: benchmark name, class names, prompt templates, ...


@dataclass(frozen=True)
class KindSpec:
    name: str
    required: tuple[str, ...]  # columns that must exist
    text_columns: tuple[str, ...]  # string or list<string> columns holding captions
    optional: tuple[str, ...] = ()
    image_column: str = "image"  # "image": one path per row; "images": a list of paths per row


KINDS: dict[str, KindSpec] = {
    # gold among candidate captions (pairwise = two candidates)
    "candidates": KindSpec("candidates", ("record_id", "image", "captions", "gold"), ("captions",), ("crop",)),
    # (image, positive, negatives, split) for train-head
    "training": KindSpec(
        "training", ("record_id", "image", "positive", "negatives", "split"), ("positive", "negatives"), ("crop",)
    ),
    # a gallery: each row one image and its captions (the links)
    "retrieval": KindSpec("retrieval", ("image", "captions"), ("captions",)),
    # image + label; the class prompts live in the file metadata ("prompts": [..])
    "classification": KindSpec("classification", ("image", "label"), ()),
    # one caption chooses among candidate images (ImageCoDe, SPEC text-to-image): gold indexes images
    "image_candidates": KindSpec(
        "image_candidates", ("record_id", "images", "caption", "gold"), ("caption",), image_column="images"
    ),
    # Winoground-style 2x2 groups: images[i]'s own caption is captions[i]
    "groups": KindSpec("groups", ("record_id", "images", "captions"), ("captions",), image_column="images"),
    # SugarCrepe++-style: an image, two captions that describe it (paraphrases) and a negative
    "paraphrases": KindSpec(
        "paraphrases", ("record_id", "image", "positives", "negative"), ("positives", "negative"), ("crop",)
    ),
}


@dataclass(frozen=True)
class ImageRef:
    row: int
    path: str
    crop: tuple[float, float, float, float] | None


@dataclass(frozen=True)
class CaptionRef:
    row: int
    column: str
    text: str


@dataclass
class Manifest:
    path: str
    kind: str
    table: pa.Table
    meta: dict = field(default_factory=dict)

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.kind]

    def __len__(self) -> int:
        return self.table.num_rows

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Manifest":
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ManifestError(f"{path}: manifest not found")
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises several kinds for a non-Parquet file
            raise ManifestError(f"{path}: not a readable Parquet file ({e})") from e
        md = table.schema.metadata or {}
        if META_VERSION in md:
            try:
                version = int(md[META_VERSION])
            except ValueError:
                raise ManifestError(
                    f"{path}: {META_VERSION.decode()} {md[META_VERSION][:20]!r} is not an integer; "
                    f"rewrite the manifest with write_manifest"
                ) from None
            if version > SCHEMA_VERSION:
                raise ManifestError(
                    f"{path}: manifest schema version {version} is newer than this "
                    f"flowclip reads ({SCHEMA_VERSION}); upgrade flowclip"
                )
        kind = md.get(META_KIND, b"").decode("utf-8", "replace") or _infer_kind(path, table)
        if kind not in KINDS:
            raise ManifestError(f"{path}: unknown manifest kind {kind!r}; known: {sorted(KINDS)}")
        meta = {}
        if META_EXTRA in md:
            try:
                meta = json.loads(md[META_EXTRA])
            except ValueError as e:
                raise ManifestError(f"{path}: {META_EXTRA.decode()} is not valid JSON ({e})") from None
            if not isinstance(meta, dict):
                raise ManifestError(f"{path}: {META_EXTRA.decode()} must be a JSON object, got {type(meta).__name__}")
        _check_utf8(path, table)
        m = cls(path, kind, table, meta)
        m._validate()
        return m

    def _validate(self) -> None:
        cols = set(self.table.column_names)
        for c in self.spec.required:
            if c not in cols:
                raise ManifestError(
                    f"{self.path}: missing column {c!r} (a {self.kind!r} manifest needs "
                    f"{', '.join(self.spec.required)}; found {', '.join(sorted(cols))})"
                )
        if self.table.num_rows == 0:
            raise ManifestError(f"{self.path}: the manifest is empty (0 rows)")
        if self.kind == "classification" and not self.meta.get("prompts"):
            raise ManifestError(
                f"{self.path}: a classification manifest needs 'prompts' in its "
                f"flowclip.meta (one list of prompts per class)"
            )
        self._check_types()
        self._check_no_null_text()
        for _ in self.image_refs():  # empty paths, NUL bytes, bad UTF-8, bad crops: refused on read
            pass
        if "record_id" in cols:
            ids = [str(i) for i in self.table.column("record_id").to_pylist()]
            if len(set(ids)) < len(ids):
                seen, dup = set(), []
                for i in ids:
                    if i in seen and i not in dup:
                        dup.append(i)
                    seen.add(i)
                raise ManifestError(
                    f"{self.path}: {len(dup)} record_id values appear more than once "
                    f"(first: {', '.join(map(repr, dup[:5]))}); each record needs its own id"
                )
        if self.kind == "image_candidates":
            for row, (g, imgs) in enumerate(
                zip(self.table.column("gold").to_pylist(), self.table.column("images").to_pylist())
            ):
                if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < len(imgs or []):
                    raise ManifestError(
                        f"{self.path}: row {row}: gold {g!r} is not the index of one of its {len(imgs or [])} images"
                    )
        if self.kind == "groups":
            for row, (imgs, caps) in enumerate(
                zip(self.table.column("images").to_pylist(), self.table.column("captions").to_pylist())
            ):
                if len(imgs or []) != 2 or len(caps or []) != 2:
                    raise ManifestError(
                        f"{self.path}: row {row}: a group holds 2 images and 2 captions, "
                        f"found {len(imgs or [])} and {len(caps or [])}"
                    )
        if self.kind == "paraphrases":
            for row, pos in enumerate(self.table.column("positives").to_pylist()):
                if len(pos or []) != 2:
                    raise ManifestError(f"{self.path}: row {row}: positives holds 2 captions, found {len(pos or [])}")
        if "gold" in cols and "captions" in cols:
            for row, (g, caps) in enumerate(
                zip(self.table.column("gold").to_pylist(), self.table.column("captions").to_pylist())
            ):
                if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < len(caps or []):
                    raise ManifestError(
                        f"{self.path}: row {row}: gold {g!r} is not the index of one of its {len(caps or [])} captions"
                    )

    def _check_types(self) -> None:
        """Column types a manifest must have: text where text is read, integers for gold."""
        import pyarrow.types as pt

        schema = self.table.schema
        text = lambda t: pt.is_string(t) or pt.is_large_string(t) or pt.is_binary(t) or pt.is_large_binary(t)
        checks = (
            [("image", text, "text (a path)")]
            + [("images", lambda t: (pt.is_list(t) or pt.is_large_list(t)) and text(t.value_type), "a list of text")]
            + [
                (
                    c,
                    lambda t: text(t) or ((pt.is_list(t) or pt.is_large_list(t)) and text(t.value_type)),
                    "text or a list of text",
                )
                for c in self.spec.text_columns
            ]
            + [("gold", pt.is_integer, "integers"), ("label", pt.is_integer, "integers")]
        )
        for col, ok, what in checks:
            if col in schema.names and not ok(schema.field(col).type):
                raise ManifestError(f"{self.path}: column {col!r} is {schema.field(col).type}, expected {what}")

    def _check_no_null_text(self) -> None:
        """A null caption (or a null in a caption list) is refused on read, naming its row:
        `manifest check` says so, not the extract that meets it."""
        import pyarrow.compute as pc
        import pyarrow.types as pt

        for col in self.spec.text_columns:
            values = self.table.column(col)
            rows = pc.is_null(values)
            if pt.is_list(values.type) or pt.is_large_list(values.type):
                items = pc.is_null(pc.list_flatten(values))
                if pc.any(items).as_py():  # the row of the first null item
                    row = pc.list_parent_indices(values)[pc.index(items, True).as_py()].as_py()
                    raise ManifestError(f"{self.path}: row {row}: a null caption in column {col!r}")
            if pc.any(rows).as_py():
                raise ManifestError(f"{self.path}: row {pc.index(rows, True).as_py()}: null caption in column {col!r}")

    # -- what extract needs ----------------------------------------------------------
    def row_images(self) -> list[list[str]]:
        """Each row's image paths, in order (one for most kinds, several for image
        candidates and groups): image_refs() flattened row by row."""
        col = self.table.column(self.spec.image_column).to_pylist()
        return [list(v) if isinstance(v, list) else [v] for v in col]

    def image_refs(self) -> Iterator[ImageRef]:
        """Every image a row names, row by row (several per row for the list kinds)."""
        name = self.spec.image_column
        crops = self.table.column("crop").to_pylist() if "crop" in self.table.column_names else None
        for row, paths in enumerate(self.table.column(name).to_pylist()):
            if paths is None or (name == "images" and not paths):
                raise ManifestError(f"{self.path}: row {row}: no image in column {name!r}")
            for p in paths if name == "images" else [paths]:
                yield self._image_ref(row, p, crops[row] if crops is not None else None)

    def _image_ref(self, row: int, p, crop_value) -> ImageRef:
        if p is None or (isinstance(p, str) and not p.strip()):
            raise ManifestError(f"{self.path}: row {row}: empty image path in column {self.spec.image_column!r}")
        if isinstance(p, bytes):
            p = _decode(self.path, row, "image", p)
        if "\x00" in p:
            raise ManifestError(f"{self.path}: row {row}: image path {p!r} holds a NUL byte")
        crop = None
        if crop_value is not None:
            crop = tuple(float(c) for c in crop_value)
            if len(crop) != 4 or crop[2] <= 0 or crop[3] <= 0:
                raise ManifestError(
                    f"{self.path}: row {row}: crop must be [x, y, width, height] with positive size, got {crop_value}"
                )
        return ImageRef(row, p, crop)  # type: ignore[arg-type]  # four values, checked above

    def caption_refs(self) -> Iterator[CaptionRef]:
        for col in self.spec.text_columns:
            values = self.table.column(col).to_pylist()
            for row, v in enumerate(values):
                items = v if isinstance(v, list) else [v]
                for t in items:
                    if t is None:
                        raise ManifestError(f"{self.path}: row {row}: null caption in column {col!r}")
                    if isinstance(t, bytes):
                        t = _decode(self.path, row, col, t)
                    yield CaptionRef(row, col, t)
        if self.kind == "classification":
            for prompts in self.meta["prompts"]:
                for t in prompts:
                    yield CaptionRef(-1, "meta.prompts", t)


def image_path_problem(path) -> str | None:
    """Why PATH cannot be a converter's image path (None when it can): it must be
    non-empty text, relative, and stay under the image root ('..' never leads out)."""
    if not isinstance(path, str) or not path.strip():
        return "is not a path (empty or not text)"
    if "\x00" in path:
        return "holds a NUL byte"
    if os.path.isabs(path) or path.startswith(("/", "\\")) or (path[0].isalpha() and path[1:2] == ":"):
        return "is absolute: a benchmark's image path is relative to the image root"
    if ".." in path.replace("\\", "/").split("/"):
        return "leads outside the image root ('..')"
    return None


def _decode(path: str, row: int, col: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(
            f"{path}: row {row}: column {col!r} is not valid UTF-8 ({e}); re-encode the manifest's text as UTF-8"
        ) from e


def _infer_kind(path: str, table: pa.Table) -> str:
    cols = set(table.column_names)
    if {"positive", "negatives"} & cols:
        return "training"
    if {"positives", "negative"} <= cols:
        return "paraphrases"
    if "images" in cols:
        return "image_candidates" if "caption" in cols else "groups"
    if "gold" in cols:
        return "candidates"
    if "label" in cols:
        return "classification"
    if "captions" in cols:
        return "retrieval"
    raise ManifestError(
        f"{path}: cannot tell the manifest kind: no flowclip.kind metadata and "
        f"none of the columns 'captions', 'gold', 'positive', 'label' "
        f"(found {', '.join(sorted(cols))})"
    )


def write_manifest(path: str | os.PathLike, table: pa.Table, kind: str, meta: dict | None = None) -> None:
    """Write a manifest with its kind and schema version in the file metadata (atomically)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    md = dict(table.schema.metadata or {})
    md[META_KIND] = kind.encode()
    md[META_VERSION] = str(SCHEMA_VERSION).encode()
    if meta:
        md[META_EXTRA] = json.dumps(meta, sort_keys=True).encode()
    table = table.replace_schema_metadata(md)
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def check_manifest(m: Manifest, image_root: str | None = None) -> list[str]:
    """Missing images under the root and duplicate captions in a set (duplicate record ids
    are refused when the manifest is read)."""
    problems = []
    if image_root:
        seen = {}
        for ref in m.image_refs():
            if ref.path not in seen:
                seen[ref.path] = image_file_exists(image_root, ref.path)
            if not seen[ref.path]:
                problems.append(f"{m.path}: row {ref.row}: image {ref.path!r} not found under {image_root}")
    if m.kind == "candidates":
        for row, caps in enumerate(m.table.column("captions").to_pylist()):
            if len(set(caps)) < len(caps):
                problems.append(f"{m.path}: row {row}: duplicate captions in the candidate set")
    return problems


def _check_utf8(path: str, table) -> None:
    """Refuse a text column with bytes that are not UTF-8 (pyarrow reads such a file but
    fails on the first use of the value), naming the column and row."""
    import pyarrow as pa

    for name in table.column_names:
        col = table.column(name)
        nested = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
        typ = col.type.value_type if nested else col.type
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            continue
        start = 0
        for chunk in col.chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowInvalid:
                for i in range(len(chunk)):
                    try:
                        one = chunk.slice(i, 1)
                        (one.flatten() if nested else one).validate(full=True)
                    except pa.ArrowInvalid:
                        raise ManifestError(
                            f"{path}: row {start + i}, column {name!r}: text that is not valid "
                            f"UTF-8; re-encode the value as UTF-8 and write the manifest again"
                        ) from None
            start += len(chunk)


def split_by_image(m: Manifest, fraction: float, seed: int) -> tuple[pa.Table, pa.Table]:
    """(part A, part B) of a manifest's rows: a row goes to A when the hash of (seed, its
    images) falls below `fraction`, so every row of an image goes the same way and the split
    of a row depends on nothing else (not on row order or the other rows)."""
    import hashlib

    name = m.spec.image_column
    to_a = []
    for paths in m.table.column(name).to_pylist():
        key = "\x00".join(sorted(paths) if name == "images" else [paths])
        digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
        to_a.append(int.from_bytes(digest[:8], "big") / 2**64 < fraction)
    mask = pa.array(to_a)
    a, b = m.table.filter(mask), m.table.filter(pa.compute.invert(mask))
    if not a.num_rows or not b.num_rows:
        parts = f"{a.num_rows} and {b.num_rows} rows"
        raise ManifestError(f"{m.path}: --fraction {fraction} leaves one part empty ({parts})")
    return a, b
