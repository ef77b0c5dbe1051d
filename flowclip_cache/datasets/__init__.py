"""The benchmark registry: one line per benchmark file. Adding a benchmark is adding
its file here and, if it ships a catalogue entry, one YAML in the repository's manifests/."""

from __future__ import annotations

import importlib

from ..errors import FlowclipError
from .base import Benchmark

REGISTRY = [
    "sugarcrepe",
    "abc6k",
    "aro_vg_relation",
    "aro_vg_attribution",
    "aro_coco_order",
    "aro_flickr_order",
    "whatsup_coco_spatial",
    "whatsup_gqa_spatial",
    "whatsup_controlled_a",
    "whatsup_controlled_b",
    "crepe_productivity",
    "crepe_systematicity",
    "pug_spar",
    "clevr_binding",
    "clevr_binding_pool",
    "coco_retrieval",
    "flickr_retrieval",
    "cifar10",
    "cifar100",
    "imagenetv2",
    "wds_classification",
    "wds_retrieval",
    "elevater",
    "coco_train",
    "cc3m_train",
    "sample",
    "synthetic_heldout_swap_att",
    "synthetic_object",
    "synthetic_replace",
    "synthetic_add",
    "synthetic_order",
    "synthetic_relation",
    "synthetic_swap_obj",
    "synthetic_swap_att",
    "paper_standin",
    "winoground",
    "eqben",
    "colorswap",
    "mmvp_vlm",
    "bivlc",
    "imagecode",
    "spec_i2t",
    "spec_t2i",
    "cola_multiobj",
    "valse",
    "sugarcrepe_pp",
    "vl_checklist",
    "svo_probes",
    "naturalbench",
    "vismin",
    "hard_positives",
    "negbench_mcq",
    "negbench_retrieval",
    "countercurate",
    "countercurate_counting",
    "sdci_matching",
    "sdci_negatives",
    "synthetic_groups",
    "synthetic_image_choice",
    "synthetic_paraphrases",
]


def all_benchmarks() -> dict[str, Benchmark]:
    out = {}
    for mod in REGISTRY:
        b = importlib.import_module(f"{__name__}.{mod}").BENCHMARK
        out[b.name] = b
    return out


def get(name: str) -> Benchmark:
    benches = all_benchmarks()
    if name not in benches:
        raise FlowclipError(f"unknown benchmark {name!r}; known: {', '.join(sorted(benches))}")
    return benches[name]
