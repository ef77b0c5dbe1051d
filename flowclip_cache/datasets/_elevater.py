"""What ELEVATER's toolkit decides for a zero-shot set, read from a checkout of it
(Computer-Vision-in-the-Wild/Elevater_Toolkit_IC, given by `--option toolkit=`) as data,
never run:

    vision_benchmark/resources/datasets/<task>.yaml     DATASET.DATASET (the hub name), TEST.METRIC
    vision_benchmark/resources/datasets/vision_datasets.json
                                                         per hub name: type (multiclass or
                                                         multilabel), the test index file,
                                                         the labelmap, the test image count
    vision_benchmark/datasets/prompts.py                 class_map and template_map: parsed
                                                         with `ast`, only list and dict
                                                         literals read (the file is never run)

vision_benchmark/evaluation/feature.py `extract_text_features` takes the class names from
class_map (a name given as a list: its first entry), else the dataset's labelmap, and the
templates from template_map, else ['a photo of a {}'], formatting each with
`template.format(classname)`."""

from __future__ import annotations

import ast
import json
import os

from ..errors import ManifestError
from .base import read_text

# vl_compo's 21 zero-shot columns (individual_results.csv `elevator::<task>`), each the name
# of ELEVATER's resources/datasets/<task>.yaml
VL_COMPO_TASKS = (
    "caltech101", "cifar10", "cifar100", "country211", "dtd", "eurosat-clip", "fer2013", "fgvc-aircraft-2013b",
    "flower102", "food101", "gtsrb", "hateful-memes", "imagenet-1k", "kitti-distance", "mnist", "oxford-iiit-pets",
    "patchcamelyon", "rendered-sst2", "resisc45-clip", "stanfordcar", "voc2007classification",
)  # fmt: skip
DEFAULT_TEMPLATES = ["a photo of a {}"]  # extract_text_features' default
RESOURCES = ("vision_benchmark", "resources", "datasets")


def task_config(toolkit: str, task: str) -> dict:
    """{hub, metric, multilabel, index, labelmap, images} of one task."""
    import yaml

    if task not in VL_COMPO_TASKS:
        raise ManifestError(f"--option task={task!r}: not one of ELEVATER's 21 ({', '.join(VL_COMPO_TASKS)})")
    path = os.path.join(toolkit, *RESOURCES, f"{task}.yaml")
    try:
        conf = yaml.safe_load(read_text(path))
        hub, metric = conf["DATASET"]["DATASET"], conf["TEST"]["METRIC"]
    except (yaml.YAMLError, KeyError, TypeError) as e:
        raise ManifestError(f"{path}: not an ELEVATER dataset config (DATASET.DATASET, TEST.METRIC): {e}") from None
    listing = os.path.join(toolkit, *RESOURCES, "vision_datasets.json")
    try:
        entries = {x["name"]: x for x in json.loads(read_text(listing))}
        entry = entries[hub]
        multilabel = {"classification_multiclass": False, "classification_multilabel": True}[entry["type"]]
        test = entry["test"]
        cfg = {"hub": hub, "metric": metric, "multilabel": multilabel, "index": test["index_path"],
               "coco": entry.get("format") == "coco", "labelmap": entry.get("labelmap"),
               "images": test.get("num_images")}  # fmt: skip
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ManifestError(f"{listing}: no usable entry for {hub!r} ({type(e).__name__}: {e})") from None
    for name in (cfg["index"], cfg["labelmap"]):  # read under the copy's folder, nowhere else
        if name is not None and not inside(name):
            raise ManifestError(f"{listing}: {hub}: {str(name)[:80]!r} is not a file name inside the set's folder")
    return cfg


def inside(rel) -> bool:
    """A relative path that stays inside the folder it is relative to (no '..', not absolute)."""
    parts = str(rel).replace("\\", "/").split("/")
    return isinstance(rel, str) and bool(rel) and not os.path.isabs(rel) and ".." not in parts


def prompt_tables(toolkit: str) -> tuple[dict, dict]:
    """(class_map, template_map) of prompts.py: hub name -> list, from literals only."""
    path = os.path.join(toolkit, "vision_benchmark", "datasets", "prompts.py")
    try:
        tree = ast.parse(read_text(path), filename=path)
    except SyntaxError as e:
        raise ManifestError(f"{path}: line {e.lineno}: not Python this reader parses ({e.msg})") from None
    lists: dict[str, list] = {}
    maps: dict[str, dict] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if isinstance(node.value, ast.List):
            try:
                lists[name] = ast.literal_eval(node.value)
            except ValueError:
                continue  # not a literal: never needed unless a map names it (refused there)
        elif isinstance(node.value, ast.Dict) and name in ("class_map", "template_map"):
            maps[name] = {}
            for k, v in zip(node.value.keys, node.value.values):
                if not (isinstance(k, ast.Constant) and isinstance(v, ast.Name) and v.id in lists):
                    raise ManifestError(f"{path}: line {node.lineno}: {name} maps to something not a literal list")
                maps[name][k.value] = lists[v.id]
    if set(maps) != {"class_map", "template_map"}:
        raise ManifestError(f"{path}: no class_map and template_map (is this ELEVATER's prompts.py?)")
    return maps["class_map"], maps["template_map"]


def class_names(toolkit: str, hub: str, labelmap: list[str]) -> list[str]:
    """class_map's names for the hub name (a list entry: its first), else the labelmap."""
    names = prompt_tables(toolkit)[0].get(hub) or labelmap
    out = [n[0] if isinstance(n, list) else n for n in names]
    if not out or not all(isinstance(n, str) and n for n in out):
        raise ManifestError(f"{hub}: class names must be non-empty text")
    return out


def templates(toolkit: str, hub: str) -> list[str]:
    temps = prompt_tables(toolkit)[1].get(hub, DEFAULT_TEMPLATES)
    for t in temps:
        try:
            ok = isinstance(t, str) and t.format("x") is not None
        except (IndexError, KeyError, ValueError):
            ok = False
        if not ok:
            raise ManifestError(f"{hub}: template {str(t)[:80]!r} is not formatted by str.format(classname)")
    return list(temps)
