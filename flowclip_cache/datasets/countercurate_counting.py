"""CounterCurate's counting test (HanSolo9682/CounterCurate benchmark/CLIP_test_counting.py
`test`; Zhang et al., ACL 2024 Findings): Visual Genome images, each with the objects
PointQA's LookTwiceQA asks to count. Read from a folder holding either vg_dict.json (what
benchmark/prep_count_benchmark.py writes: {image id: [{name, ans}, ...]}) or a checkout of
princetonvisualai/pointingqa with Datasets/LookTwiceQA/looktwiceqa_dataset.json, which is
then read as prep_count_benchmark.py reads it: each item's (id, obj_type, ans) appended to
its image's list in file order, and every image asked about the same object name twice
left out. The images are visual_genome/<id>.jpg under the folder (the image root).

Score, as `test` computes it: for each image and each of its objects, the image's choice
between "there are {ans} {name} in the image." and "there are {int(ans)+1} {name} in the
image.", right when the first's probability is above the second's (`text_probs[0] >
text_probs[1]`: the softmax of 100 x the cosines keeps their order; strict, a tie is
wrong); correct / count, pooled over every (image, object)."""

import os

from .base import Benchmark, BuildReport, ManifestError, RowErrors, Scoring, load_json, write_records

VG_DICT = "vg_dict.json"
LOOKTWICE = os.path.join("Datasets", "LookTwiceQA", "looktwiceqa_dataset.json")


def vg_dict_from_looktwice(ds: dict) -> dict:
    """prep_count_benchmark.py's vg_dict from looktwiceqa_dataset.json."""
    vg: dict = {}
    remove = set()
    for items in ds.values():
        for item in items:
            i, name, ans = item["id"], item["obj_type"], item["ans"]
            vg.setdefault(i, [])
            if any(q["name"] == name for q in vg[i]):
                remove.add(i)
            vg[i].append({"name": name, "ans": ans})
    return {i: v for i, v in vg.items() if i not in remove}


def _read(source: str) -> tuple[dict, str]:
    if os.path.isfile(os.path.join(source, VG_DICT)):
        path = os.path.join(source, VG_DICT)
        return load_json(path), path
    path = os.path.join(source, LOOKTWICE)
    if not os.path.isfile(path):
        raise ManifestError(f"{source}: neither {VG_DICT} nor {LOOKTWICE} (see CounterCurate's README, Benchmarking)")
    ds = load_json(path)
    try:
        return vg_dict_from_looktwice(ds), path
    except (AttributeError, KeyError, TypeError) as e:
        raise ManifestError(f"{path}: not in LookTwiceQA's layout ({type(e).__name__}: {e})") from None


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    vg, path = _read(source)
    if not isinstance(vg, dict):
        raise ManifestError(f"{path}: expected a JSON object of image id -> objects")
    rows = []
    for index, items in vg.items():
        if not isinstance(items, list):
            errors(path, f"image {index!r:.40}", "expected a list of {name, ans} objects")
            continue
        for k, item in enumerate(items):
            name, ans = (item.get("name"), item.get("ans")) if isinstance(item, dict) else (None, None)
            try:
                more = int(ans)  # type: ignore[arg-type]  # the release's int(ans) + 1 (None: TypeError)
            except (TypeError, ValueError):
                errors(path, f"image {index!r:.40}, object {k}", f"ans {ans!r:.20} is not a whole number")
                continue
            if not isinstance(name, str) or not name.strip():
                errors(path, f"image {index!r:.40}, object {k}", "no object name")
                continue
            caps = [f"there are {ans} {name} in the image.", f"there are {more + 1} {name} in the image."]
            rows.append({"record_id": f"{index}/{k}", "image": f"visual_genome/{index}.jpg", "captions": caps,
                         "gold": 0, "_at": f"{path}: image {index}, object {k}"})  # fmt: skip
    report = BuildReport(len(rows), len({r["image"] for r in rows}), {"counting": len(rows)}, errors.skipped)
    report.notes.append(f"read {path}")
    return write_records(out, rows, "candidates", "countercurate-counting", report)


BENCHMARK = Benchmark(
    name="countercurate-counting",
    title="CounterCurate counting (Visual Genome; the count against one more)",
    kind="candidates",
    build=build,
    scoring=Scoring(task="pairwise", tie_rule="wrong"),
)
