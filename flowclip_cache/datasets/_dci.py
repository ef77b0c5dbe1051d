"""The summarised Densely Captioned Images test (sDCI; Urbanek et al., CVPR 2024;
facebookresearch/DCI 8326c97): the entries its loader yields, for sdci_matching.py and
sdci_negatives.py.

Read from the release's data folder (dci.tar.gz unpacked: densely_captioned_images/ with
splits.json, complete/<file>.json and photos/), as dataset/densely_captioned_images/
dataset/impl.py `get_summarized_dataset_with_settings` reads it for split "test": the
files splits.json lists, in its order; an image without summaries, or without negatives
(or with one negative entry where sub-masks are loaded), left out; entries of an image:
the whole photo (key "base"), then each mask whose box is at least 224 x 224
(dense_image.py `filter_masks_by_size`, masks in the file's order; key "m-<idx>-sc") as
the crop `get_subimage` cuts: the box padded by int(0.15 x its side) each way, clipped to
the photo. Each entry's caption is its summary (the first, where a list), its negative
chosen by `get_negative_by_strategy`: "first" (the source's first), or "hardest" over
every source (`any`: the sources in the file's order) by the file's clip_scores, a stable
ascending sort whose last is taken. The release skips an image whose loading raises
anything (a key missing, a bound not an integer), subtest by subtest: so does flowclip,
naming each in the build's notes and the manifest's metadata. Entries are then batched
8 at a time in this order (`run_dense_cap_test_on_model`'s DataLoader, shuffle=False),
across image boundaries.

The subtests of run_clip_dense_cap_eval.py `run_dense_cap_on_model`: all_swaps,
base_swaps, all_hardest, and all_swaps_pick5 under its own name, all_swaps_pick5_first:
the release keeps the entries with at least five summaries (DenseCaptionedDataset) and
draws each one's bag of five with random.sample (get_clip_ready_ds leaves is_test=False),
so its own figure changes from run to run; flowclip takes the first five, what the
loader's is_test=True branch takes. A bag is scored pooled (metrics.pool_bags)."""

from __future__ import annotations

import os

from ..manifest import image_path_problem
from .base import BuildReport, ManifestError, load_json, write_records

SUBTESTS = {  # name: (load_base_image, load_subcaptions, negative_source, negative_strategy, caption_bag_size)
    "all_swaps": (True, True, "swaps", "first", 0),
    "all_swaps_pick5_first": (True, True, "swaps", "first", 5),  # ours: the release draws the five at random
    "base_swaps": (True, False, "swaps", "first", 0),
    "all_hardest": (True, True, "any", "hardest", 0),
}
BATCH = 8  # run_dense_cap_test_on_model's DataLoader(batch_size=8, shuffle=False)
MIN_SIDE, PAD = 224, 0.15


def dci_root(source: str) -> str:
    """The folder holding splits.json: SOURCE itself or its densely_captioned_images/."""
    for root in (source, os.path.join(source, "densely_captioned_images")):
        if os.path.isfile(os.path.join(root, "splits.json")):
            return root
    raise ManifestError(f"{source}: no splits.json here or in densely_captioned_images/ (unpack dci.tar.gz)")


def split_files(root: str) -> list[str]:
    splits = load_json(os.path.join(root, "splits.json"))
    files = splits.get("test") if isinstance(splits, dict) else None
    if not isinstance(files, list):
        raise ManifestError(f"{root}/splits.json: expected an object with a 'test' list of annotation files")
    for f in files:
        problem = image_path_problem(f) if isinstance(f, str) else "is not text"
        if problem:
            raise ManifestError(
                f"{root}/splits.json: test entry {f!r:.80} {problem} (it must name a file in complete/)"
            )
    return files


def _int(x) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise TypeError(f"a bound {x!r:.20} is not an integer (the release slices the photo with it)")
    return x


def _box(mask: dict) -> tuple[int, int, int, int]:
    b = mask["bounds"]
    return _int(b["topLeft"]["x"]), _int(b["topLeft"]["y"]), _int(b["bottomRight"]["x"]), _int(b["bottomRight"]["y"])


def crop_of(mask: dict, width: int, height: int) -> list[int]:
    """get_subimage's crop as [x, y, w, h]: the box padded by int(0.15 x side), clipped."""
    x1, y1, x2, y2 = _box(mask)
    wp, hp = int((x2 - x1) * PAD), int((y2 - y1) * PAD)
    cx1, cy1 = max(x1 - wp, 0), max(y1 - hp, 0)
    cx2, cy2 = min(x2 + wp, width), min(y2 + hp, height)
    if cx2 <= cx1 or cy2 <= cy1:
        raise ValueError(f"mask {mask['idx']}'s crop is empty inside the {width}x{height} photo")
    return [cx1, cy1, cx2 - cx1, cy2 - cy1]


def _caption_of(mask: dict):
    """dense_image.py `_extract_caption` (what building an entry reads of each mask)."""
    if mask["mask_quality"] == 2:
        return None
    return mask["label"] if mask["mask_quality"] == 1 else f"{mask['label']}: {mask['caption']}"


def _submasks(data: dict, mask: dict, depth: int = 999, budget: list | None = None) -> list[dict]:
    """get_all_submasks_dfs(mask, include_self=False): read as the release reads it, so that
    an image whose mask tree it cannot walk is left out as it leaves it out. A stranger's
    file whose masks require each other in a branching cycle would make that walk
    exponential (the release hangs): past 100,000 masks visited it is refused (ours)."""
    budget = [100_000] if budget is None else budget
    if depth == 0:
        return []
    subs = [data["mask_data"].get(str(m)) for m in mask["requirements"]]
    out = []
    for s in (s for s in subs if s is not None and s["mask_quality"] != 2):
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError("its masks require each other in a cycle (over 100,000 visited)")
        out += [s] + _submasks(data, s, depth - 1, budget)
    return out


def negative_of(negs: dict, source: str, strategy: str, clip_scores: dict) -> str:
    """get_negative_by_strategy for the "first" and "hardest" strategies."""
    if source != "any":
        cands = list(negs[source])
        names = [f"{source}_{i}" for i in range(len(cands))]
    else:
        cands, names = [], []
        for kind, vals in negs.items():
            cands += vals
            names += [f"{kind}_{i}" for i in range(len(vals))]
    if strategy == "first":
        return cands[0]
    ranked = sorted(zip(cands, names), key=lambda x: clip_scores[x[1]])  # stable, as list.sort
    return ranked[-1][0]


def _entries(data: dict, size: tuple[int, int], subtest: str) -> list[dict] | None:
    """One image's entries under a subtest; None where the release leaves the image out
    before building any. Raises what the release would raise on malformed data."""
    base, subs, source, strategy, bag = SUBTESTS[subtest]
    summaries, negatives = data.get("summaries"), data.get("negatives")
    if summaries is None or negatives is None or (len(negatives) == 1 and subs):
        return None
    picked: list[tuple[str, list[int] | None]] = []
    if base:  # get_formatted_complete_description reads every mask's caption fields
        _ = (data["short_caption"], data["extra_caption"], [_caption_of(m) for m in data["mask_data"].values()])
        picked.append(("base", None))
    if subs:
        for m in data["mask_data"].values():
            x1, y1, x2, y2 = _box(m)
            if x2 - x1 >= MIN_SIDE and y2 - y1 >= MIN_SIDE:
                _ = (m["label"], m["caption"], [_caption_of(s) for s in _submasks(data, m)])
                picked.append((f"m-{m['idx']}-sc", crop_of(m, *size)))
    out = []
    for key, crop in picked:
        s = summaries[key]
        caption = s if isinstance(s, str) else s[0]
        negative = negative_of(negatives[key], source, strategy, data["clip_scores"][key])
        if not isinstance(caption, str) or not isinstance(negative, str):
            raise TypeError(f"entry {key}: its summary or negative is not text")
        entry = {"key": key, "crop": crop, "caption": caption, "negative": negative, "bag": [caption]}
        if bag:  # DenseCaptionedDataset keeps an entry with at least `bag` summaries (a list), of them the first `bag`
            if isinstance(s, str) or len(s) < bag:
                continue
            entry["bag"] = list(s[:bag])
        out.append(entry)
    return out


def split_entries(source: str) -> tuple[dict[str, list[dict]], int, list[str]]:
    """{subtest: its entries in the loader's order, each with its photo (relative to
    photos/), crop, caption, negative, key and annotation file}, how many of the split's
    images no subtest takes (no summaries or negatives), and a line for each image a
    subtest leaves out because loading it raised (as the release's try/except does: the
    official counts leave them out, so they are notes of the build, not refusals)."""
    from PIL import Image

    root = dci_root(source)
    out: dict[str, list[dict]] = {s: [] for s in SUBTESTS}
    without, left_out = 0, []
    for f in split_files(root):
        path = os.path.join(root, "complete", f)
        try:
            data = load_json(path)
            photo = data["image"]
            problem = image_path_problem(photo)
            if problem:
                raise ValueError(f"its image {photo!r:.80} {problem}")
            with Image.open(os.path.join(root, "photos", photo)) as im:
                size = im.size
        except (ManifestError, OSError, KeyError, TypeError, ValueError) as e:
            left_out.append(f"{path}: left out of every subtest ({type(e).__name__}: {e})")
            continue
        got = 0
        for s in SUBTESTS:  # the release loads each subtest on its own: a failure leaves out that one
            try:
                entries = _entries(data, size, s)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as e:
                left_out.append(f"{path}: left out of {s} ({type(e).__name__}: {e})")
                continue
            got += entries is not None
            out[s] += [{**e, "image": photo, "file": f} for e in entries or []]
        without += got == 0
    return out, without, left_out


def build(source: str, out: str, errors, name: str, record) -> BuildReport:
    """A test's manifest: one record per entry, its candidates from record(entries of its
    subtest, position) -> {captions, bags, gold, ...}; the report notes the images left out
    as the release leaves them out."""
    entries, without, left_out = split_entries(source)
    rows = [
        {"record_id": f"{s}/{p}", "image": e["image"], "crop": e["crop"], "subtest": s, "key": e["key"],
         "dci_file": e["file"], "_at": f"{e['file']}: {e['key']}", **record(es, p)}
        for s, es in entries.items()
        for p, e in enumerate(es)
    ]  # fmt: skip
    report = BuildReport(len(rows), len({r["image"] for r in rows}), {s: len(es) for s, es in entries.items()},
                         errors.skipped)  # fmt: skip
    report.notes += [
        f"{without} test image(s) without summaries or negatives, left out as the release leaves them out",
        f"{len(left_out)} image-subtest(s) left out because loading raised, as the release's try/except "
        "leaves them out (the manifest's metadata 'left_out' names each)",
        *left_out[:20],
    ]
    return write_records(out, rows, "candidates", name, report, {"left_out": left_out})
