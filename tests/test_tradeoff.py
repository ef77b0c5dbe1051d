"""The two axes (scoring/tradeoff.py): `flowclip results` shows each scorer's compositional,
zero-shot and retrieval means over the tasks every row has, and `--plot tradeoff` draws
them, vl_compo's models behind. Each mean recomputed here from results.json.

Mutation tried: the means over each row's own tasks (not the tasks every row has) turns
test_means_run_over_the_tasks_every_row_has red; the zero-shot mean taken from top-5 turns
the first test red."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import assert_refused

from flowclip_cache.cli import main
from flowclip_cache.manifest import Manifest, write_manifest


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The sample's candidate set and a zero-shot set on its images, scored by CLIP and
    FILIP's training-free score (two scorers: an arrow between them)."""
    from flowclip_cache.synthetic.sample import make_sample

    root = tmp_path_factory.mktemp("tradeoff")
    s = make_sample(str(root / "sample"), n_images=12)
    cand = Manifest.read(s["candidates"]).table.to_pylist()
    classes = ["red", "green", "blue", "yellow", "purple"]
    rows = [{"image": r["image"], "label": i % 5} for i, r in enumerate(cand)]
    meta = {"benchmark": "cifar10", "classes": classes, "prompts": [[f"a photo of a {c} thing."] for c in classes]}
    write_manifest(root / "zs.parquet", pa.Table.from_pylist(rows), "classification", meta)
    r = cli("extract", "--store", root / "store", "--model", "flowclip-tiny-clip", "--pretrained", "synthetic",
            "--manifest", s["candidates"], "--manifest", root / "zs.parquet", "--image-root", s["image_root"],
            "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    for name, manifests in (("both", [s["candidates"], root / "zs.parquet"]), ("compositional", [s["candidates"]])):
        args = [a for m in manifests for a in ("--manifests", m)]
        r = cli("score", "--store", root / "store", *args, "--scorer", "clip", "--scorer", "filip-score",
                "--bootstrap", "0", "--no-figures", "--quiet", "--out", root / "scores" / name)  # fmt: skip
        assert r.exit_code == 0, r.output
    return root


def test_the_means_and_the_figure(scored, tmp_path):
    r = cli("results", scored / "scores" / "both", "--plot", "tradeoff", "--out", tmp_path / "t")
    assert r.exit_code == 0, r.output
    head = next(x for x in r.output.splitlines() if x.startswith("| results"))
    assert "compositional mean (1)" in head and "zero-shot mean (1)" in head and "retrieval" not in head
    res = json.load(open(scored / "scores" / "both" / "results.json"))["results"]
    names = [c.strip() for c in head.split("|")]
    for scorer in ("clip", "filip-score"):
        line = next(x for x in r.output.splitlines() if f"| {scorer} |" in x)
        cell = dict(zip(names, (c.strip() for c in line.split("|"))))
        want = res[f"real|{scorer}"]
        assert cell["compositional mean (1)"] == f"{100 * want['sample']['score']:.2f}"
        assert cell["zero-shot mean (1)"] == f"{100 * want['cifar10']['top1']:.2f}"
    assert "compositional mean over: sample" in r.output and "zero-shot mean over: cifar10" in r.output
    assert (tmp_path / "t" / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_means_run_over_the_tasks_every_row_has(scored, tmp_path):
    r = cli("results", scored / "scores")
    assert r.exit_code == 0, r.output
    head = next(x for x in r.output.splitlines() if x.startswith("| results"))
    assert "compositional mean (1)" in head and "zero-shot" not in head.split("| cifar10")[0]  # one row lacks it
    r = cli("results", scored / "scores", "--plot", "tradeoff", "--out", tmp_path / "t")
    assert_refused(r, "--plot tradeoff", "zero-shot")
    assert not (tmp_path / "t").exists()


def test_vl_compos_models_behind(scored, tmp_path):
    published = tmp_path / "results.csv"
    published.write_text(",arch,pretrained,family,comp_avg,21_tasks_avg\n0,ViT-B-32,openai,OpenCLIP,45.1,61.2\n"
                         "1,NegCLIP,coco-ft,StructuredCLIP,47.9,55.9\n")  # fmt: skip
    r = cli(
        "results", scored / "scores" / "both", "--plot", "tradeoff", "--published", published, "--out", tmp_path / "t"
    )
    assert r.exit_code == 0, r.output and (tmp_path / "t" / "tradeoff.png").exists()
    published.write_text(",arch,pretrained,family,comp_avg,21_tasks_avg\n0,ViT-B-32,openai,OpenCLIP,n/a,61.2\n")
    r = cli(
        "results", scored / "scores" / "both", "--plot", "tradeoff", "--published", published, "--out", tmp_path / "u"
    )
    assert_refused(r, "row 2", "comp_avg", "not a number")
    r = cli("results", scored / "scores" / "both", "--published", published)
    assert_refused(r, "--out")


def test_a_study_summary_carries_the_recognition_mean_beside_the_compositional_one(scored):
    from flowclip_cache.studies.study import summarise
    from flowclip_cache.studies.summary import summary_markdown

    score = json.load(open(scored / "scores" / "both" / "results.json"))
    summary = summarise(score, [], None, training_free=["filip-score"])
    res = score["results"]
    for method in ("clip", "filip-score"):
        row = summary["table"][method]
        assert row["compositional mean"]["mean"] == pytest.approx(100 * res[f"real|{method}"]["sample"]["score"])
        assert row["zero-shot mean"]["mean"] == pytest.approx(100 * res[f"real|{method}"]["cifar10"]["top1"])
    delta = summary["table"]["filip-score"]["compositional mean"]["delta"]
    assert delta == pytest.approx(
        100 * (res["real|filip-score"]["sample"]["score"] - res["real|clip"]["sample"]["score"])
    )
    assert summary["mean_members"]["zero-shot mean"] == ["cifar10"]
    assert "zero-shot mean" in "\n".join(summary_markdown(summary))
    # a study of compositional tasks alone shows no axis columns (its means are its tasks')
    only = json.load(open(scored / "scores" / "compositional" / "results.json"))
    assert "compositional mean" not in summarise(only, [], None, training_free=["filip-score"])["columns"]
