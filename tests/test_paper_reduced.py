"""The whole paper plan on the synthetic world: every step runs as one command, every table and figure of the paper
is written in its layout with the published numbers beside ours and the stand-ins
labelled; a rerun does nothing; a step whose output is lost is redone alone; two ranks
under torchrun write the one-process tables."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from flowclip_cache.cli import main

SMALL = [
    "standins={seed: 0, train_scenes: 120, eval_scenes: 50}",
    "seeds=[0]",
    "bootstrap=50",
    "explorer_records=3",
    "figures=false",  # the studies' own PNGs: time; OUT/paper's figures are drawn all the same
    "recipes={coco-train: {epochs: 1, lr: 1.0e-3}, cc3m-train: {epochs: 1, lr: 1.0e-3}}",
]
TABLES = ("tab1", "tab2", "tab3", "tab4", "tab5", "tab6", "tab7", "sec43", "fig3", "fig7")


def _paths(root) -> list[str]:
    return [f"data={root}/world", f"manifests={root}/manifests", f"cache={root}/cache", f"out={root}/studies"]


def _run(root, *extra):
    r = CliRunner().invoke(main, ["run", "paper-synthetic", *SMALL, *_paths(root), *extra])
    assert r.exit_code == 0, r.output[-4000:]
    return r.output


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper") / "one"
    return root, _run(root)


def _table(md: str, first: str) -> list[list[str]]:
    """The rows of the Markdown table whose header starts with `first`."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_every_table_and_figure_in_the_papers_layout(reduced):
    root, out = reduced
    paper = root / "studies" / "paper"
    for name in TABLES:
        md = (paper / f"{name}.md").read_text()
        assert "**Stand-ins (the reduced run).**" in md, name  # labelled, every one
        assert "Not run yet" not in md, name  # every step ran: nothing is missing
    for name in ("fig3", "fig7"):
        assert (paper / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    tab1 = _table((paper / "tab1.md").read_text(), "source")
    released = {"COCO": ("CE-CLIP",), "CC3M": ("DAC-LLM", "DAC-SAM", "TSVLC")}  # each in its source's block
    assert [(r[0], r[1]) for r in tab1] == [
        (b, m)
        for b in ("COCO", "CC3M")
        for m in (
            "CLIP",
            "NegCLIP",
            *(("NegCLIP (released)",) if b == "COCO" else ()),  # a stand-in in its released form
            "LABCLIP",
            "FSC-CLIP",
            *released[b],
            "DCSM",
            "Flow-CLIP, frozen",
            "Flow-CLIP, adapted",
        )
    ]  # fmt: skip
    for r in tab1:  # measured everywhere but DCSM's row (not in the plan)
        assert ("missing" in " ".join(r)) == (r[1] == "DCSM"), r
    tab2 = _table((paper / "tab2.md").read_text(), "scorer")
    rows = ["CLIP", "Global-M (HNB)", "Global-M+CIMR", "Flow-CLIP (HNB)", "Flow-CLIP+CIMR"]
    rows += ["FILIP score, frozen (ours; not in the paper)"]  # scored by tab2-coco's study
    assert [r[0] for r in tab2] == rows + [f"Δ {r}" for r in rows[1:]]
    assert not any("missing" in c for r in tab2 for c in r)  # all 11 tasks and both means stood in for
    assert "paper 55.95" in tab2[0][15] and "paper 71.10" in tab2[4][15]  # the published 11-task means
    assert len(_table((paper / "tab3.md").read_text(), "λ_CIMR")) == 8
    tab4 = _table((paper / "tab4.md").read_text(), "scorer")  # CLIP, NegCLIP (released), LABCLIP, FSC-CLIP, four heads
    assert len(tab4) == 8 * 3 and not any(c.startswith("missing") for r in tab4 for c in r)
    assert sum(r[0] == "NegCLIP (released)" for r in tab4) == 3  # (before: left out of the reduced run)
    # every block of the paper's Tabs. 5 and 6; BLIP and ViT-L/14 have no stand-in: they read
    # missing, as in a real plan without them, and the range "across the three backbones" too
    for name, encoders, absent in (
        ("tab5", ["SigLIP", "BLIP"], "BLIP"),
        ("tab6", ["ViT-B/32", "ViT-B/16", "ViT-L/14"], "ViT-L/14"),
    ):
        md = (paper / f"{name}.md").read_text()
        rows = _table(md, "encoder")
        assert [(r[0], r[1]) for r in rows] == [(e, s) for e in encoders for s in ("Base", "Global-M", "Flow-CLIP")]
        for r in rows:  # binding5 and sugar3 included where measured
            assert all(c.startswith("missing") for c in r[2:]) == (r[0] == absent), r
    assert "the three backbones, ARO Avg., lowest: missing" in (paper / "tab6.md").read_text()
    tab7 = _table((paper / "tab7.md").read_text(), "")
    assert [r[0] for r in tab7] == ["CIFAR-10", "CIFAR-100", "ImageNetV2", "Flickr30k T2I", "Flickr30k I2T",
                                    "COCO T2I", "COCO I2T"]  # fmt: skip
    assert len(_table((paper / "fig7.md").read_text(), "task")) == 8  # two records per ARO task
    import csv

    for name in TABLES:  # every CSV says stand-ins where its Markdown does: a CSV is read alone
        if (paper / f"{name}.csv").exists():
            data = {r["data"] for r in csv.DictReader(open(paper / f"{name}.csv"))}
            assert data == {"stand-ins (the reduced run)"}, (name, data)
    rows = list(csv.DictReader(open(paper / "tab2.csv")))
    cell = next(r for r in rows if r["row"].startswith("CLIP |") and r["column"] == "Avg. (11 tasks)")
    assert cell["ours"] == tab2[0][15].split("<br>")[0] and cell["paper"] == "55.95"  # the CSV is the table's numbers
    sec43 = (paper / "sec43.md").read_text()
    for part in ("Training variability", "Confidence intervals", "Decision changes", "Encoder adaptation"):
        assert f"## §4.3 {part}" in sec43
    missing = [line for line in sec43.splitlines() if "ours missing" in line]
    assert missing and all("sample std" in line for line in missing)  # one seed here: no spread, all else measured
    assert "our 95% interval" in (paper / "tab2.md").read_text()  # the paired bootstrap beside the text
    assert (root / "studies" / "explorer" / "aro-vg-relation" / "explorer.html").exists()
    assert not list((root / "studies" / "tab2-coco" / "score").glob("*.png"))  # figures=false: results only


def test_the_tables_carry_the_scores_numbers(reduced):
    """A cell is the scores' number: Tab. 2's CLIP VG-R and Flow-CLIP's 11-task mean, Tab. 7's
    NegCLIP COCO T2I (the adapted encoder's store scored as CLIP), Tab. 3's reference row."""
    root, _ = reduced
    studies, paper = root / "studies", root / "studies" / "paper"
    res = json.load(open(studies / "tab2-coco" / "score" / "results.json"))
    run = {s["method"]: s["run"] for s in res["scorers"]}
    tab2 = _table((paper / "tab2.md").read_text(), "scorer")
    assert tab2[0][4] == f"{100 * res['results']['real|clip']['aro-vg-relation']['score']:.2f}"
    mean = res["cross_task_means"][f"real|{run['flow_hnb_cimr']}"]["all11"]
    assert tab2[4][15].split("<br>")[0] == f"{100 * mean['mean']:.2f}" and not mean["partial"]
    neg = json.load(open(studies / "adapted" / "negclip-coco-s0-scores" / "results.json"))
    t2i = neg["results"]["real|clip"]["coco-retrieval"]["t2i_R@1"]
    tab7 = _table((paper / "tab7.md").read_text(), "")
    assert tab7[5][2].split("<br>")[0] == f"{100 * t2i:.2f}"
    sens = json.load(open(studies / "tab3" / "score" / "results.json"))
    ref = next(s["run"] for s in sens["scorers"] if s["method"] == "cimr 0.1, tau_p 0.05, alpha 1.0")
    aro = sens["cross_task_means"][f"real|{ref}"]["aro"]["mean"]
    row = next(r for r in _table((paper / "tab3.md").read_text(), "λ_CIMR") if "reference" in r[2])
    assert row[:2] == ["0.10", "0.05"] and row[7] == f"{100 * aro:.2f}"


def test_a_rerun_does_nothing_and_a_lost_output_is_redone_alone(reduced):
    """(The same folders: the step markers hold the plan's commands, paths included.)"""
    root, _ = reduced
    before = {n: (root / "studies" / "paper" / f"{n}.md").read_text() for n in TABLES}
    out = _run(root)
    assert ": running" not in out and out.count(": done") == 57  # every step done; only the tables rewritten
    shutil.rmtree(root / "studies" / "adapted" / "negclip-coco-s0-scores")  # a lost output: its step reruns
    out = _run(root)
    running = [line for line in out.splitlines() if line.endswith(": running")]
    assert len(running) == 1 and re.fullmatch(r"\[\d+/57\] adapt negclip-coco-s0: running", running[0]), running
    assert "(done: " in out  # its adapt run had finished: only the extract and the scoring ran again
    assert {n: (root / "studies" / "paper" / f"{n}.md").read_text() for n in TABLES} == before  # the same bits


def test_two_ranks_under_torchrun_write_the_one_process_numbers(reduced, tmp_path):
    """Part of the plan (one training source, four benchmarks, the main encoder, FSC-CLIP's
    stand-in) into a new study folder as two processes under torchrun, from the world,
    manifests and stores the one-process run made: both ranks ran steps, and every number
    the two-rank run's tables hold (its CSVs) is the one-process run's, bit for bit."""
    import csv

    import torch

    root, _ = reduced
    # as many threads per rank as the one-process run had (torchrun's default is one): a
    # CPU sum over other threads differs in the last bits, and an adapted encoder's
    # weights with it (its store, shared here, would then refuse them)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ROOT, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    two = tmp_path / "studies"
    part = [
        "sources={coco-train: {source: ., images: images}, aro-vg-relation: {source: ., images: images}, "
        "sugarcrepe: {source: ., images: images}, abc6k: {source: ., images: images}, "
        "coco-retrieval: {source: ., images: images}}",
        "encoders={vit_b32: {model: flowclip-tiny-clip, pretrained: synthetic}}",
        "checkpoints={fsc_clip: standin-fsc-clip-coco/encoder.safetensors}",
    ]
    cmd = [*torchrun, "-m", "flowclip_cache", "run", "paper-synthetic", *SMALL, *part, *_paths(root)[:-1], f"out={two}"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    markers = two / ".paper-steps"
    ranks = [json.load(open(markers / n))["rank"] for n in sorted(os.listdir(markers)) if n.endswith(".done")]
    assert sorted(set(ranks)) == [0, 1]  # the steps that are not studies, shared between the ranks
    assert p.stdout.count("runs to train here") >= 2  # and the studies' runs
    compared = 0
    for name in ("tab1", "tab2", "tab3", "tab4", "tab7", "fig7"):
        cells = lambda folder: {(r["row"], r["column"]): r for r in csv.DictReader(open(folder / f"{name}.csv"))}  # noqa: E731
        one, got = cells(root / "studies" / "paper"), cells(two / "paper")
        for key, row in got.items():
            if row["ours"]:  # measured here (a mean missing members, or a row not in the part, is empty)
                assert row == one[key], (name, key)
                compared += 1
    assert compared > 100


def test_the_reduced_run_scores_the_image_choice_and_group_kinds(reduced):
    """Not in the paper's tables: the synthetic image-choice and group sets (the field's
    kinds) go through the reduced run's manifests, stores and studies all the same."""
    root, _ = reduced
    found = {}
    for dirpath, _, files in os.walk(root / "studies"):
        if "results.json" in files:
            res = json.load(open(os.path.join(dirpath, "results.json"))).get("results", {})
            for per in res.values():
                for task in ("synthetic-groups", "synthetic-image-choice"):
                    if task in per:
                        found.setdefault(task, per[task])
    assert set(found) == {"synthetic-groups", "synthetic-image-choice"}
    assert set(found["synthetic-groups"]["metrics"]) == {"text", "image", "group"}
    assert found["synthetic-image-choice"]["n"] == 20  # a third of 50 evaluation scenes, 20 at least
