"""`flowclip run encoders-suite` (studies/encoders_suite.py): encoders of three families,
frozen, on the paper suite's stand-ins; one model x benchmark table whose cells are the
scores' own figures; spread over ranks; beside vl_compo's published figures
(studies/vl_compo.py), on made-up numbers and on the real CSVs where they are at hand."""

import csv
import json
import os

import pytest
from click.testing import CliRunner
from conftest import SHARED_BENCHMARKS, TINY, needs_shared

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError

WORLD = "standins={seed: 0, train_scenes: 20, eval_scenes: 40}"
# the three families' test: 30 scenes, CIFAR-10's 12 images for recognition, no per-score PNGs (CI time)
SMALL = ("standins={seed: 0, train_scenes: 10, eval_scenes: 30}", "recognition=[cifar10]", "figures=false")


def _run(tmp_path, *extra):
    r = CliRunner().invoke(main, ["run", "encoders-suite", f"out={tmp_path}/study", f"cache={tmp_path}/cache", WORLD,
                                  "device=cpu", "--quiet", *extra])  # fmt: skip
    assert r.exit_code == 0, r.output[-3000:]
    return r.output


@pytest.fixture(scope="module")
def three(tmp_path_factory, siglip_tokenizer, blip_folder):
    """An OpenAI-style CLIP, a SigLIP and a BLIP, random weights, on the stand-ins."""
    root = tmp_path_factory.mktemp("suite")
    encs = (f"encoders={{clip: {{model: {TINY}}}, siglip: {{model: ViT-B-16-SigLIP, tokenizer: {siglip_tokenizer}}}, "
            f"blip: {{model: 'blip:{blip_folder}', pretrained: none}}}}")  # fmt: skip
    return root, encs, _run(root, encs, *SMALL)


def test_one_table_of_every_encoder_from_their_scores(three):
    """Each cell is the encoder's own score (real images, CLIP scorer) of that member, the
    mean the mean of the 11 columns (a mean turned max, or a column read from the wrong
    member, would fail), the recognition column the mean zero-shot top-1."""
    from flowclip_cache.scoring.suites import PAPER

    root, _, out = three
    study = root / "study"
    rows = {r["encoder"]: r for r in csv.DictReader(open(study / "summary.csv"))}
    assert list(rows) == ["clip", "siglip", "blip"]
    for name, row in rows.items():
        res = json.load(open(study / "scores" / name / "results.json"))["results"]["real|clip"]
        cols = []
        for col, bench, path in PAPER:
            v = res[bench]
            for part in path.split("/"):
                v = v[part]
            assert float(row[col]) == pytest.approx(100 * v, abs=0.006), (name, col)
            cols.append(100 * v)
        assert float(row["paper mean"]) == pytest.approx(sum(cols) / 11, abs=0.006)
        assert float(row["zero-shot top-1"]) == pytest.approx(100 * res["cifar10"]["top1"], abs=0.006)
        from flowclip_cache.store import FeatureStore

        st = FeatureStore(str(root / "cache" / name))  # each encoder's store, outside the study: global features alone
        assert st.segments and all(s.features == "global" for s in st.segments)
    assert len({json.load(open(root / "cache" / n / "store.json"))["fingerprint"] for n in rows}) == 3
    assert (study / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "**Stand-ins**" in (study / "summary.md").read_text()


def test_a_rerun_scores_nothing_again(three):
    root, encs, _ = three
    before = (root / "study" / "summary.csv").read_text()
    out = _run(root, encs, *SMALL)
    assert out.count(": scored (") == 3 and "extract" not in out
    assert (root / "study" / "summary.csv").read_text() == before


def test_ranks_share_the_encoders_and_the_last_writes_the_table(tmp_path, monkeypatch):
    """Rank 1 of 2 scores its encoder and leaves the table to the other; rank 0 scores the
    rest and writes it (as under torchrun or a Slurm array: ranks meet in the folder)."""
    encs = f"encoders={{a: {{model: {TINY}}}, b: {{model: {TINY}, init_seed: 1}}, c: {{model: {TINY}, init_seed: 2}}}}"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    out = _run(tmp_path, encs)
    assert "other ranks are still scoring" in out and not (tmp_path / "study" / "summary.csv").exists()
    assert sorted(os.listdir(tmp_path / "study" / "scores")) == ["b", "b.claim"]
    monkeypatch.setenv("RANK", "0")
    _run(tmp_path, encs)
    assert [r["encoder"] for r in csv.DictReader(open(tmp_path / "study" / "summary.csv"))] == ["a", "b", "c"]


def test_beside_made_up_published_figures(three, tmp_path):
    """ours - published per sub-metric, from a made-up vl_compo file; a row named by its
    family where two share (arch, pretrained); a note where a difference is expected."""
    from flowclip_cache.config import build, find_config, load_yaml
    from flowclip_cache.studies.encoders_suite import CONFIG, suite_rows
    from flowclip_cache.studies.vl_compo import comparison_rows

    root, _, _ = three
    path = tmp_path / "individual_results.csv"
    path.write_text("arch,pretrained,family,aro::VG_Relation,sugarcrepe::swap_att,whatsup::COCO_QA_ONE\n"
                    f"{TINY},none,A,40.0,50.0,10.0\nX,y,A,1,2,3\nX,y,B,4,5,6\n")  # fmt: skip
    data = load_yaml(find_config("encoders-suite")) | {"out": str(root / "study"), "published_individual": str(path),
                                                       "recognition": ["cifar10"]}  # fmt: skip
    data["encoders"] = {"clip": {"model": TINY}, "siglip": {"model": "ViT-B-16-SigLIP", "published_as": "X|y|B"}}
    cfg = build(CONFIG, data, "test")
    rows = suite_rows(cfg, {})
    got = {(r[0], r[2]): r for r in comparison_rows(cfg, rows)}
    res = rows["clip"]["results"]
    assert got[("clip", "aro::VG_Relation")][5] == pytest.approx(100 * res["aro-vg-relation"]["score"] - 40.0)
    assert got[("clip", "sugarcrepe::swap_att")][5] == pytest.approx(
        100 * res["sugarcrepe"]["by_subset"]["swap_att"] - 50
    )
    assert got[("clip", "whatsup::COCO_QA_ONE")][6] == got[("clip", "sugarcrepe::swap_att")][6] == ""
    from flowclip_cache.studies.vl_compo import expected

    assert "ELEVATER" in expected("elevator::cifar10") and "not public" in expected("coco_karpathy::i2t/R@1")
    sig = rows["siglip"]["results"]
    assert got[("siglip", "aro::VG_Relation")][4] == 4.0  # family B's row, not A's
    assert got[("siglip", "whatsup::COCO_QA_ONE")][3] == pytest.approx(
        100 * sig["whatsup-coco-spatial"]["by_subset"]["one"]
    )
    cfg.encoders["siglip"]["published_as"] = "X|y"
    with pytest.raises(FlowclipError, match="2 rows X \\(y\\), families A, B: name one"):
        comparison_rows(cfg, rows)
    path.write_text(f"arch,pretrained,family,aro::VG_Relation\n{TINY},none,A,n/a\n")
    with pytest.raises(FlowclipError, match="row 2 .* column aro::VG_Relation: 'n/a' is not a number"):
        comparison_rows(cfg, rows)


VL_COMPO = os.environ.get("FLOWCLIP_VL_COMPO")  # a folder holding vl_compo's results.csv, individual_results.csv


@pytest.mark.skipif(not VL_COMPO, reason="FLOWCLIP_VL_COMPO (a folder with vl_compo's two CSVs) is not set")
def test_the_real_vl_compo_files_parse():
    """Every column flowclip compares is in vl_compo's files, a number on every row."""
    from flowclip_cache.studies.vl_compo import HEADLINE, SUBMETRICS, match, read_published

    ind = read_published(os.path.join(VL_COMPO, "individual_results.csv"), SUBMETRICS)
    head = read_published(os.path.join(VL_COMPO, "results.csv"), HEADLINE)
    assert len(ind) == len(head) == 202
    assert set(match(ind, ("ViT-B-32", "openai"), "t")) == set(SUBMETRICS)
    assert set(match(head, ("NegCLIP", "coco-ft"), "t")) == set(HEADLINE)


def test_config_refusals(tmp_path):
    from flowclip_cache.config import build, find_config, load_yaml
    from flowclip_cache.studies.encoders_suite import CONFIG

    base = load_yaml(find_config("encoders-suite"))
    bad_configs = (({"suite": "vl_compo"}, "no such suite"), ({"encoders": {"a": {"pretrained": "x"}}}, "give model"),
                   ({"eval": {"/data": ["m.parquet"]}}, "not both"))  # fmt: skip
    for bad, match in bad_configs:
        with pytest.raises(FlowclipError, match=match):
            build(CONFIG, base | bad, "test")


def test_a_suite_mean_lacking_members_is_marked(tmp_path):
    """The field suite on the stand-ins: the members without a stand-in are named absent,
    the mean over the columns present is marked, and the CSV names the columns it lacks."""
    _run(tmp_path, "suite=field", f"encoders={{a: {{model: {TINY}}}}}", "recognition=[cifar10]")
    md = (tmp_path / "study" / "summary.md").read_text()
    assert "- winoground: absent (no synthetic stand-in" in md and "- \\*: the mean of the columns present" in md
    row = next(csv.DictReader(open(tmp_path / "study" / "summary.csv")))
    assert "winoground" in row["mean lacks columns"].split(";") and row["winoground"] == ""
    other = ("encoder", "model", "pretrained", "field mean", "zero-shot top-1", "mean lacks columns", "partial members")
    present = [float(row[c]) for c in row if c not in other and row[c]]
    assert float(row["field mean"]) == pytest.approx(sum(present) / len(present), abs=0.01)


def test_the_docs_real_data_config_is_a_valid_study():
    """docs/encoders-suite.md's YAML builds (every key known, eval and encoders well formed)."""
    import yaml
    from conftest import ROOT

    from flowclip_cache.config import build
    from flowclip_cache.studies.encoders_suite import CONFIG

    text = open(os.path.join(ROOT, "docs", "encoders-suite.md")).read()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = build(CONFIG, yaml.safe_load(block), "docs/encoders-suite.md")
    assert cfg.suite == "vl-compo" and cfg.standins is None and len(cfg.encoders) == 5
    assert cfg.encoders["dac_llm"]["published_as"] == "DAC-LLM|cc3m-ft"


def test_a_member_scored_nan_is_missing_not_averaged():
    """An official rule with nothing to aggregate scores NaN (ARO with no group large
    enough): the suite counts the member missing, and its mean is that of the others."""
    from flowclip_cache.scoring.suites import PAPER, suite_table

    res = {b: {"score": 0.5, "named_groups": {"Swap-A": 0.5, "Swap-O": 0.5}} for _, b, _ in PAPER}
    res["aro-vg-attribution"] = {"score": float("nan"), "groups_used": 0}
    res["abc6k"] = {"score": 0.8}
    row = suite_table("paper", {"real|clip": res}, {})["real|clip"]
    assert row["VG-A"]["value"] is None and row["VG-A"]["missing"] == ["aro-vg-attribution"]
    assert row["mean"]["missing"] == ["VG-A"] and row["mean"]["value"] == pytest.approx((9 * 0.5 + 0.8) / 10)


def test_a_figure_resting_on_part_of_its_records_is_marked(tmp_path):
    """A member whose result says `partial` (records it could not score) marks its cell and
    the suite mean with †, and the CSV names it."""
    from flowclip_cache.config import build, find_config, load_yaml
    from flowclip_cache.scoring.suites import PAPER
    from flowclip_cache.studies.encoders_suite import CONFIG, write_summary

    data = load_yaml(find_config("encoders-suite")) | {"out": str(tmp_path), "recognition": ["cifar10"]}
    data["encoders"] = {"a": {"model": TINY}}
    cfg = build(CONFIG, data, "test")
    res = {b: {"score": 0.5, "named_groups": {"Swap-A": 0.5, "Swap-O": 0.5}} for _, b, _ in PAPER}
    res["abc6k"]["partial"] = {"records": 3}
    res["cifar10"] = {"top1": 0.25}
    os.makedirs(tmp_path / "scores" / "a")
    (tmp_path / "scores" / "a" / "results.json").write_text(json.dumps({"results": {"real|clip": res}}))
    write_summary(cfg, {}, log=lambda *a: None)
    md = (tmp_path / "summary.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| a |")).split(" | ")
    assert row[9] == "50.00†" and row[4] == "50.00" and row[-2] == "50.00†"  # ABC, VG-A, the mean
    assert "- †: resting on part of a benchmark's records" in md
    assert next(csv.DictReader(open(tmp_path / "summary.csv")))["partial members"] == "abc6k"


@needs_shared("sugarcrepe", "add_att.json")
def test_vl_compos_sugarcrepe_weights_are_our_headlines(tmp_path):
    """vl_compo's SugarCrepe column, fitted to its published rows, weights the seven subsets
    .1432 .0683 .1219 .0896 .2437 .2496 .0838 (docs/method.md): each subset's share of its
    family's records over 3, i.e. the mean of Add, Replace and Swap pooled over records,
    which is flowclip's headline; derived here from the released files' counts."""
    import numpy as np

    from flowclip_cache.datasets import get
    from flowclip_cache.datasets.base import RowErrors
    from flowclip_cache.scoring.aggregation import aggregate

    b = get("sugarcrepe")
    r = b.build(os.path.join(SHARED_BENCHMARKS, "sugarcrepe"), str(tmp_path / "sc.parquet"), RowErrors())
    family = {m: name for name, members in b.scoring.groups if name in b.scoring.headline_groups for m in members}
    total = {f: sum(n for s, n in r.counts.items() if family[s] == f) for f in set(family.values())}
    weights = {s: n / total[family[s]] / 3 for s, n in r.counts.items()}
    published = {"replace_obj": 0.1432, "replace_att": 0.0683, "replace_rel": 0.1219, "swap_obj": 0.0896,
                 "swap_att": 0.2437, "add_obj": 0.2496, "add_att": 0.0838}  # fmt: skip
    assert {s: round(w, 4) for s, w in weights.items()} == published
    from flowclip_cache.studies.vl_compo import expected

    assert expected("sugarcrepe") == ""  # so the comparison expects no difference there (it said one)
    # and the headline is that weighted sum of the subsets' accuracies, on planted decisions
    from flowclip_cache.manifest import Manifest

    cols = Manifest.read(tmp_path / "sc.parquet").table.to_pydict()
    rng = np.random.default_rng(0)
    s = rng.normal(size=(len(cols["subset"]), 2)).astype(np.float32)
    res = aggregate(b.scoring, s, np.zeros(len(s), np.int64), cols)
    by = res["by_subset"]
    assert res["score"] == pytest.approx(sum(weights[k] * by[k] for k in weights), abs=1e-12)


def test_the_dry_run_names_benchmarks_disk_and_time(three):
    """--dry-run creates nothing and prints each benchmark (its manifest's images and
    captions, or why absent), then per encoder the store's disk (2 bytes x width x (images
    + captions) for global features) and the forward's time on this CPU."""
    import re

    from flowclip_cache.manifest import Manifest

    root, _, _ = three
    before = sorted(os.listdir(root))
    args = [f"out={root}/study", f"cache={root}/cache", *SMALL, f"encoders={{a: {{model: {TINY}}}}}", "device=cpu"]
    field = CliRunner().invoke(main, ["run", "encoders-suite", *args, "suite=field", "--dry-run"])
    assert "winoground                 absent: no synthetic stand-in" in field.output
    assert "crepe-productivity         a synthetic stand-in, built by the run" in field.output
    assert "disk and time once the stand-ins are built" in field.output
    r = CliRunner().invoke(main, ["run", "encoders-suite", *args, "--dry-run"])  # the paper suite's, all built
    assert r.exit_code == 0, r.output[-3000:]
    assert sorted(os.listdir(root)) == before
    counted = re.findall(r"  ([\w-]+) +\S+\.parquet: ([\d,]+) images, ([\d,]+) captions", r.output)
    assert {b for b, _, _ in counted} >= {"sugarcrepe", "clevr-binding", "cifar10"}
    m = Manifest.read(str(root / "study" / "manifests" / "clevr-binding.parquet"))
    images = {b: int(i.replace(",", "")) for b, i, _ in counted}
    assert images["clevr-binding"] == len({p for ps in m.row_images() for p in ps}), r.output
    total = sum(int(i.replace(",", "")) + int(c.replace(",", "")) for _, i, c in counted)
    pattern = r"\[todo\] a: .*; ~([\d.]+) MiB \(global features, (\d+)-d, FP16\); ~[\d.]+ (s|min|h) of forward on cpu"
    line = re.search(pattern, r.output)
    assert line and int(line[2]) == 64, r.output  # the tiny ViT's width
    assert float(line[1]) == pytest.approx(2 * 64 * total / 2**20, abs=0.006)


@pytest.mark.skipif(not VL_COMPO, reason="FLOWCLIP_VL_COMPO (a folder with vl_compo's two CSVs) is not set")
def test_the_suites_recognition_columns_give_vl_compos_from_its_individual_figures():
    """On every row: the vl-compo suite's coco/flickr R@1 columns, imagenet, 21_tasks_avg,
    i2t_avg and t2i_avg, computed by suite_table from individual_results.csv's figures placed
    where flowclip's results hold them, equal results.csv's columns (rows matched by arch and
    pretrained, and family where two rows share those: the files name ALIP's family apart)."""
    from flowclip_cache.scoring.suites import VL_COMPO_RECOGNITION, suite_table
    from flowclip_cache.studies.vl_compo import HEADLINE, SUBMETRICS, read_published

    ind = read_published(os.path.join(VL_COMPO, "individual_results.csv"), SUBMETRICS)
    head = read_published(os.path.join(VL_COMPO, "results.csv"), HEADLINE)
    checked = 0
    by_two = {k[:2]: v for k, v in head.items()}
    for key, figures in ind.items():
        published = head.get(key) or by_two[key[:2]]
        results: dict = {}
        for column, value in figures.items():
            bench, path = SUBMETRICS[column]
            node = results.setdefault(bench, {})
            *parents, leaf = path.split("/")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value / 100
        row = suite_table("vl-compo", {"r": results}, {})["r"]
        for column in (*VL_COMPO_RECOGNITION, "i2t_avg", "t2i_avg"):
            assert 100 * row[column]["value"] == pytest.approx(published[column], abs=1e-6), (key, column)
            checked += 1
    assert checked == 202 * 8
