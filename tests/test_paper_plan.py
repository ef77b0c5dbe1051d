"""`flowclip run paper --dry-run`: the whole paper's plan on a machine with none of
its inputs, every printed command one that flowclip parses, what exists and what is missing,
estimates labelled, and nothing created."""

import os
import shlex

import click
from click.testing import CliRunner

from flowclip_cache import outputs
from flowclip_cache.cli import main
from flowclip_cache.paper.checkpoints import RELEASED

QUICK = ["measure=false", "device=cpu"]


def _dry(tmp_path, *extra):
    args = ["run", "paper", "--dry-run", f"data={tmp_path}/data", f"out={tmp_path}/paper"]
    args += [f"manifests={tmp_path}/manifests", f"cache={tmp_path}/cache", *extra]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return r.output


def _commands(output: str) -> list[list[str]]:
    return [shlex.split(line.strip()[2:]) for line in output.splitlines() if line.strip().startswith("$ flowclip ")]


def test_the_plan_on_a_bare_machine_lists_every_step_and_every_missing_input(tmp_path):
    out = _dry(tmp_path, *QUICK)
    assert not os.listdir(tmp_path)  # nothing created
    steps = [line for line in out.splitlines() if line.startswith("[")]
    kinds = {}
    for line in steps:
        kinds[line.split("]")[1].split()[0]] = kinds.get(line.split("]")[1].split()[0], 0) + 1
    # 19 manifests (CLEVR's 4,449-pair pool among them); 5 encoders + 7 released checkpoints (FSC-CLIP x 2,
    # NegCLIP, CE-CLIP, DAC x 2, TSVLC); Tabs. 2, 3, CC3M, 2 LABCLIP, 6, 5; an explorer per image folder of
    # the candidate-set benchmarks (aro/images, coco, flickr30k, coco/val2017, clevr-binding/images,
    # clevr-2obj/images_2obj, pug-spar, whatsup/data, vg); adapted Flow-CLIP and NegCLIP x 2 sources x
    # 3 seeds; each released checkpoint scored; the tables
    assert kinds == {"manifest": 19, "extract": 12, "study": 7, "explain": 9, "adapt": 12, "score": 7, "tables": 1}
    for line in steps:
        state = line[1:10].strip()
        raw = " manifest " in line or any(f" extract {n}" in line for n in RELEASED)  # official / released
        assert state == ("missing" if raw else "waits"), line
    missing = [line for line in out.splitlines() if line.strip().startswith("missing ")]
    assert len(missing) == 19 + 7  # every manifest's official files, every released checkpoint
    assert f"missing {tmp_path}/data/sugarcrepe: download RAIVNLab/sugar-crepe" in out
    # each released checkpoint named by its repository and file, with the command that fetches it
    assert (
        f"missing {tmp_path}/data/checkpoints/coco_fsc-clip-ViT-B-32.pt: download FSC-CLIP, ViT-B-32, OpenAI CLIP "
        "fine-tuned on COCO (huggingface.co/ytaek-oh/fsc-clip, file coco_fsc-clip-ViT-B-32.pt" in out
    )
    assert (
        f"huggingface-cli download ytaek-oh/fsc-clip cc3m_fsc-clip-ViT-B-32.pt --local-dir {tmp_path}/data/checkpoints"
        in out
    )
    assert f"gdown --id 1ooVVPxB-tvptgmHlIMMFGV3Cg-IrhbRZ -O {tmp_path}/data/checkpoints/negclip.pth" in out
    assert f"gdown 1DWPw3CtGh5cHz9bW_-iXRSG7BBUVl13K -O {tmp_path}/data/checkpoints/ce-clip.pt" in out
    # the low-rank releases: their Drive folder, the file to pick, then the merge before extract
    assert (
        f"gdown --folder 1DmHeV8oWiMwtkaTH-nruMyjBiuJvcwnv -O {tmp_path}/data/checkpoints/dac-release, then move "
        f"the checkpoint it names to {tmp_path}/data/checkpoints/dac-llm.pt" in out
    )
    assert f"gdown --folder 1WosT_kdam1ymWjVSK2ezyydLoqmm0LdX -O {tmp_path}/data/checkpoints/tsvlc-release" in out
    assert (
        f"$ flowclip checkpoint merge-lora {tmp_path}/data/checkpoints/dac-sam.pt --model ViT-B-32 --built-as openai "
        f"--out {tmp_path}/cache/dac_sam-merged.safetensors" in out
    )
    assert f"--pretrained {tmp_path}/cache/tsvlc-merged.safetensors" in out
    # FSC-CLIP as its authors built it (QuickGELU: `--pretrained openai` in their open_clip 2.24); the others
    # as their own loaders build them; each step labelled with the tables it feeds
    extracts = {line.split("$ ", 1)[1] for line in out.splitlines() if "$ flowclip extract" in line}
    fsc = [c for c in extracts if "fsc-clip-ViT-B-32.pt" in c]
    assert len(fsc) > 2 and all("--model ViT-B-32-quickgelu " in c for c in fsc), fsc  # (one per image folder)
    assert all("--model ViT-B-32 " in c for c in extracts if "negclip.pth" in c or "ce-clip.pt" in c)
    labels = {n: next(line for line in steps if f" extract {n} " in line) for n in ("fsc_clip", "ce_clip", "negclip")}
    assert "Tabs. 1, 4" in labels["fsc_clip"] and "Tabs. 1, 4, 7" in labels["negclip"]
    assert "Tab. 1" in labels["ce_clip"] and "Tabs." not in labels["ce_clip"]
    for table in ("Tab. 1", "Tab. 2", "Tab. 3", "Tab. 4", "Tab. 5", "Tab. 6", "Tab. 7", "Figs. 3, 7"):
        assert table in out
    assert "written by `flowclip run paper` (this config) once every step is done" in out
    assert "--tau-p 0.06" in out and "'tau_p': 0.06" not in out  # CC3M's recipe, in the commands
    tab6 = next(line for line in out.splitlines() if "$ flowclip run backbones" in line)
    assert '"vit_b16"' in tab6 and '"vit_b32"' not in tab6  # B/32's rows are Tab. 2's runs, not trained twice
    total = next(line for line in out.splitlines() if line.startswith("steps: "))
    assert "disk of the stores ~" in total and total.endswith("GiB (estimate)")  # the disk total, labelled


def test_every_command_of_the_plan_is_one_flowclip_parses(tmp_path):
    """Each printed command's options are its command's (click parses them), and each
    study's overrides build that study's config (unknown keys would be refused); paths with
    spaces stay whole (each command is shell-quoted)."""
    from flowclip_cache.config import apply_overrides, build, find_config, load_yaml, parse_overrides
    from flowclip_cache.studies import pipeline_module

    tmp_path = tmp_path / "with space"
    tmp_path.mkdir()
    cmds = _commands(_dry(tmp_path, *QUICK))
    assert len(cmds) > 100
    seen = set()
    for path in {a for argv in cmds for a in argv if a.startswith(str(tmp_path))}:
        os.makedirs(os.path.dirname(path), exist_ok=True)  # the inputs in place, as click checks them
        if not os.path.exists(path):
            open(path, "w").close() if os.path.splitext(path)[1] else os.mkdir(path)
    for argv in cmds:
        assert argv[0] == "flowclip"
        name, rest = argv[1], argv[2:]
        group = main.commands[name]
        if isinstance(group, click.Group):  # manifest build
            name, group, rest = rest[0], group.commands[rest[0]], rest[1:]
        group.make_context(name, list(rest))
        seen.add(name)
        if name == "run":
            data = apply_overrides(load_yaml(find_config(rest[0])), parse_overrides(rest[1:]))
            build(pipeline_module(data["kind"]).CONFIG, data, rest[0])
    assert seen == {"build", "extract", "run", "explain", "adapt", "score", "merge-lora"}


def test_what_exists_is_counted_and_marked_done(tmp_path):
    """A manifest in place: its step is done; a study with its summary is done, one begun
    but not finished is not; the steps after a missing input stay listed."""
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "s"), n_images=12)
    eval_dir = tmp_path / "manifests" / "eval"
    eval_dir.mkdir(parents=True)
    os.replace(s["candidates"], eval_dir / "sugarcrepe.parquet")
    for study in ("tab3", "tab6"):
        (tmp_path / "paper" / study).mkdir(parents=True)
    (tmp_path / "paper" / "tab3" / "summary.json").write_text("{}")  # tab6: begun, not finished
    out = _dry(tmp_path, *QUICK)
    assert f"[done     ] manifest sugarcrepe -> {eval_dir}/sugarcrepe.parquet" in out
    assert f"[done     ] study tab3 -> {tmp_path}/paper/tab3" in out
    assert "[missing  ] manifest abc6k" in out and "[waits    ] study tab6 " in out
    # the disk estimate reads a manifest in place: its own images and distinct captions
    import pyarrow.parquet as pq

    from flowclip_cache.config import build, find_config, load_yaml
    from flowclip_cache.paper.budget import counts
    from flowclip_cache.paper.plan import CONFIG

    cfg = build(CONFIG, load_yaml(find_config("paper")) | {"manifests": str(tmp_path / "manifests")}, "paper")
    table = pq.read_table(eval_dir / "sugarcrepe.parquet").to_pylist()
    captions = {c for row in table for c in row["captions"]}
    assert counts(cfg, "sugarcrepe") == (len({r["image"] for r in table}), len(captions), 0, "counted")
    assert counts(cfg, "abc6k") is None and counts(cfg, "pug-spar")[3] == "the catalogue's counts"


def test_measured_estimates_on_a_small_encoder(tmp_path):
    """With measure on (the default) the extract and study steps carry a time measured
    here on random weights / features, labelled as an estimate; the disk is FP16 counts."""
    encs = "encoders={tiny: {model: flowclip-tiny-clip, pretrained: none}}"
    sources = "sources={coco-train: {source: c.json, images: coco}, sugarcrepe: {source: s, images: coco/val2017}}"
    out = _dry(tmp_path, "device=cpu", encs, sources, "checkpoints={}", "seeds=[0]")
    extract = next(line for line in out.splitlines() if line.startswith("[waits    ] extract tiny"))
    assert "GiB (estimate)" in extract and "(estimate: encoder forward measured here on random weights (cpu)" in extract
    study = next(line for line in out.splitlines() if " study tab2-coco " in line)
    assert "(estimate: training: a step measured here on random features (cpu) x steps (the paper's counts)" in study
    # every step that takes time is budgeted, each estimate labelled with how and on what
    for kind, how in (("explain", "records x 2 scorers x a measured training step"),
                      ("adapt", "adaptation: 3 x the encoder forward measured here (cpu)")):  # fmt: skip
        lines = [line for line in out.splitlines() if line.startswith(f"[waits    ] {kind} ")]
        assert lines and all(f"(estimate: {how}" in line for line in lines), (kind, lines[:1])
    adapt = [line for line in out.splitlines() if line.startswith("[waits    ] adapt ")]
    assert all("GiB (estimate)" in line for line in adapt)  # the adapted encoder's store, on the disk total
    # 2 bytes x d x (images x (1 + patches) + captions x (1 + 16 tokens)); tiny CLIP: d 128, 64
    # patches; COCO: the paper's 113,287 images and 2 x 566,435 captions; SugarCrepe: the
    # catalogue's 1,560 images and 2 x 7,511 captions
    expected = 2 * 128 * (113_287 * 65 + 2 * 566_435 * 17 + 1_560 * 65 + 2 * 7_511 * 17)
    assert extract.split("~")[1].split(" GiB")[0] == f"{expected / 2**30:.1f}"
    from flowclip_cache.config import build, find_config, load_yaml
    from flowclip_cache.paper.budget import store_bytes
    from flowclip_cache.paper.plan import CONFIG, extract_steps

    cfg = build(CONFIG, load_yaml(find_config("paper")) | {"manifests": str(tmp_path / "m")}, "paper")
    vit_b32 = extract_steps(cfg)[0]  # the exact bytes, ViT-B/32 (d 512, 49 patches) over every source
    got, unknown = store_bytes(cfg, vit_b32, (512, 49))
    # no counts before their manifests exist
    assert unknown == ["abc6k", "clevr-binding-pool", "crepe-productivity"]
    import shlex

    from flowclip_cache.config import parse_overrides
    from flowclip_cache.paper.plan import study_steps

    # the frozen FILIP score is scored beside Tab. 2's heads (ours,), and only there
    args = {
        s.name: dict((k[0], v) for k, v in parse_overrides(shlex.split(s.commands[0])[3:])) for s in study_steps(cfg)
    }
    assert [n for n, a in args.items() if a.get("training_free") == ["filip-score"]] == ["tab2-coco"]
    # the recipe's lr 8e-05 reaches the study as a number (YAML 1.1 read it as text, refused)
    assert args["tab2-coco"]["train_config"]["lr"] == 8e-05
    evals = {  # (images, captions): the catalogue's images (else records) and 2 captions a record (5 for order
        # and retrieval, none for classification: its prompts are few)
        "aro-vg-relation": (5_316, 2 * 23_937), "aro-vg-attribution": (4_517, 2 * 28_748),
        "aro-coco-order": (5_000, 5 * 25_010), "aro-flickr-order": (1_000, 5 * 5_000), "sugarcrepe": (1_560, 2 * 7_511),
        "clevr-binding": (470, 2 * 470), "pug-spar": (19_840, 2 * 19_840), "whatsup-coco-spatial": (2_687, 2 * 2_687),
        "whatsup-gqa-spatial": (1_451, 2 * 1_451), "coco-retrieval": (5_000, 5 * 5_000),
        "flickr-retrieval": (1_000, 5 * 1_000), "cifar10": (10_000, 0), "cifar100": (10_000, 0),
        "imagenetv2": (10_000, 0),
    }  # fmt: skip
    sources = [(113_287, 2 * 566_435), (101_830, 2 * 97_734), *evals.values()]  # COCO, CC3M: the paper's
    assert got == sum(2 * 512 * (images * 50 + captions * 17) for images, captions in sources)


def _score_results(path, method_runs: dict[str, list[dict]]):
    """A score's results.json with each method's runs' results, as flowclip score writes it."""
    import json

    scorers, results = [], {}
    for method, runs in method_runs.items():
        for i, res in enumerate(runs):
            scorers.append({"run": f"{method}-{i}", "method": method})
            results[f"real|{method}-{i}"] = res
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"scorers": scorers, "results": results}))


def test_without_dry_run_it_writes_the_tables_from_the_outputs_that_exist(tmp_path):
    """Tab. 2's study and one NegCLIP seed have scored: their columns carry our numbers
    beside the paper's; CC3M's study has not run: its columns read missing and the file
    says which output is absent. A damaged results.json is refused, naming it."""
    coco = {"coco-retrieval": {"t2i_R@1": 0.30, "i2t_R@1": 0.50}, "cifar10": {"top1": 0.88}, "abc6k": {"score": 0.7}}
    flow = {"coco-retrieval": {"t2i_R@1": 0.383, "i2t_R@1": 0.49}, "cifar10": {"top1": 0.865}}
    _score_results(tmp_path / "p" / "tab2-coco" / "score", {"clip": [coco], "global": [coco], "flow_hnb_cimr": [flow]})
    _score_results(tmp_path / "p" / "adapted" / "negclip-coco-s0-scores", {"clip": [coco]})
    outputs.mark(str(tmp_path / "p"), "study")  # as the paper study made it
    r = CliRunner().invoke(main, ["run", "paper", f"out={tmp_path}/p", "seeds=[0]", *QUICK])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "p" / "paper" / "tab7.md").read_text()
    assert f"Not run yet (what they give reads 'missing'): {tmp_path}/p/tab1-cc3m/score/results.json" in md
    coco_t2i = next(line for line in md.splitlines() if line.startswith("| COCO T2I |")).split(" | ")
    assert coco_t2i[1] == "30.00<br>paper 30.2; ours -0.20"
    assert coco_t2i[5] == "38.30 (+8.30)<br>paper 38.3 (+8.1); ours +0.00"
    assert coco_t2i[6].startswith("missing<br>paper 32.7")
    assert "could not run for missing inputs" in r.output  # the steps: no data here
    tab4 = (tmp_path / "p" / "paper" / "tab4.md").read_text()  # Tab. 2's scorers under Real only here
    not_run = next(line for line in tab4.splitlines() if line.startswith("Not run yet"))
    for absent in (
        "fsc_clip-scores",
        "negclip-scores",
        "tab1-labclip-coco/score",
    ):  # Tab. 4's released and LABCLIP rows
        assert f"{tmp_path}/p/{absent}/results.json" in not_run
    hnb = next(line for line in tab4.splitlines() if line.startswith("| Global-M (HNB) | Real |")).split(" | ")
    assert hnb[2] == "missing" and hnb[10] == "70.00"  # VG-R not scored; ABC from Tab. 2's scores
    assert "| Global-M (HNB) | Shuffle | missing" in tab4 and "| FSC-CLIP | Real | missing" in tab4
    tab1 = (tmp_path / "p" / "paper" / "tab1.md").read_text()
    clip = next(line for line in tab1.splitlines() if line.startswith("| COCO | CLIP |")).split(" | ")
    assert clip[10] == "70.00"  # ABC, from Tab. 2's scores
    assert f"{tmp_path}/p/tab1-labclip-coco/score/results.json" in tab1.splitlines()[2]  # named as not run
    (tmp_path / "p" / "tab1-cc3m" / "score").mkdir(parents=True)
    (tmp_path / "p" / "tab1-cc3m" / "score" / "results.json").write_text("{not json")
    r = CliRunner().invoke(main, ["run", "paper", f"out={tmp_path}/p", "seeds=[0]", *QUICK])
    assert r.exit_code == 2 and "tab1-cc3m/score/results.json: not a flowclip score's results.json" in r.output


def test_the_readmes_command_as_written(tmp_path, monkeypatch):
    """README's last command, verbatim: exits 0 and creates nothing; with no GPU here it says
    that no time was measured."""
    import torch

    monkeypatch.chdir(tmp_path)
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    command = readme.rstrip().splitlines()[-1].strip()
    assert command == "flowclip run paper --dry-run data=/data device=cuda"
    r = CliRunner().invoke(main, shlex.split(command)[1:])
    assert r.exit_code == 0, r.output
    assert not os.listdir(tmp_path) and "] tables paper -> studies/paper/paper  (Tabs. 1-7, §4.3" in r.output
    assert ("no time measured" in r.output) is (not torch.cuda.is_available())


def test_a_failing_step_stops_with_its_error_and_other_ranks_waiting_on_it_stop_too(tmp_path, monkeypatch):
    """The runner (paper/runner.py) on a two-step plan: the failure is one line naming
    the step, left as a .failed marker; a rank waiting on that step's output stops with the
    failure's message instead of waiting for ever; a step lacking a raw input, and the step
    that needs its output, are gone past with what they lack named."""
    import pytest

    from flowclip_cache.errors import FlowclipError
    from flowclip_cache.paper.plan import PaperConfig, Step
    from flowclip_cache.paper.runner import execute

    for k in ("RANK", "WORLD_SIZE", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"):
        monkeypatch.delenv(k, raising=False)
    cfg = PaperConfig(kind="paper", out=str(tmp_path / "out"), device="cpu")
    made, raw = str(tmp_path / "m.parquet"), str(tmp_path / "absent")
    bad = Step("manifest", "a", "", made, [f"flowclip manifest build no-such --source {tmp_path} --out {made}"])
    uses = Step("score", "b", "", str(tmp_path / "scores"), ["flowclip store info nowhere"], needs=[made])
    lacking = Step("manifest", "c", "", str(tmp_path / "c.parquet"), ["flowclip manifest list"], needs=[raw],
                   raw={raw: "download it"})  # fmt: skip
    after = Step("score", "d", "", str(tmp_path / "d"), ["flowclip manifest list"], needs=[str(tmp_path / "c.parquet")])
    lines: list[str] = []
    with pytest.raises(FlowclipError, match="step manifest a: `flowclip manifest` exited with status 2"):
        execute(cfg, lambda c: [lacking, after, bad, uses], lines.append)
    assert f"cannot run, it lacks {raw}: download it" in lines[1]
    assert "cannot run, it lacks" in lines[2] and "from step manifest c, which cannot run" in lines[2]
    failed = tmp_path / "out" / ".paper-steps" / "manifest-a.failed"
    assert "rank 0: `flowclip manifest` exited with status 2" in failed.read_text()
    monkeypatch.setenv("RANK", "1")  # rank 1 of 2: step a is rank 0's (its failure is on disk), b is rank 1's
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(FlowclipError, match="step manifest a failed .rank 0: "):
        execute(cfg, lambda c: [bad, uses], lines.append)


def test_the_dry_run_measures_each_cost_once_and_nothing_after_its_deadline(monkeypatch):
    """Each encoder's forward and each head's step at a shape is measured once however
    many steps use it; once the measuring time is spent, a cost is a sentence, never a
    number (so the dry run answers within a minute on any device)."""
    from flowclip_cache.paper import costs as costs_module
    from flowclip_cache.paper.costs import Costs

    calls = []
    monkeypatch.setattr(costs_module, "measure_forward", lambda m, d: calls.append(m) or (1.0, 0.5))
    monkeypatch.setattr(costs_module, "measure_step", lambda shape, h, d: calls.append(shape) or 0.25)
    c = Costs("cpu", enabled=True)
    head = {"head": "flow", "batch_size": 32, "epochs": 1}
    assert [c.forward("A"), c.forward("A"), c.step((8, 4), head), c.step((8, 4), head)] == [(1.0, 0.5)] * 2 + [0.25] * 2
    assert calls == ["A", (8, 4)]
    c.deadline = 0.0  # spent
    assert c.forward("A") == (1.0, 0.5)  # measured before: kept
    late = c.forward("B")
    assert isinstance(late, str) and late.startswith("not measured: the dry run measures for at most")
    assert calls == ["A", (8, 4)]
    assert Costs("cpu", enabled=False).step((8, 4), head) == ""  # measure: false


def test_the_dry_run_measures_the_encoders_before_the_heads(tmp_path, monkeypatch):
    """Extraction and adaptation (the biggest steps) are priced first: with time for one
    measurement only, the encoder's forward is it, and every extract and adapt step has
    an estimate."""
    from flowclip_cache.paper import costs as costs_module

    calls = []

    def forward(model, device):
        calls.append(("forward", model))
        return (1.0, 0.5)

    monkeypatch.setattr(costs_module, "measure_forward", forward)
    monkeypatch.setattr(costs_module, "measure_step", lambda *a: calls.append(("step",)) or 0.25)
    monkeypatch.setattr(costs_module.Costs, "_get", _one_measurement(costs_module.Costs._get))
    encs = "encoders={tiny: {model: flowclip-tiny-clip, pretrained: none}}"
    sources = "sources={coco-train: {source: c.json, images: coco}, sugarcrepe: {source: s, images: coco/val2017}}"
    out = _dry(tmp_path, "device=cpu", encs, sources, "checkpoints={}", "seeds=[0]")
    assert calls == [("forward", "flowclip-tiny-clip")]
    for kind in ("extract", "adapt"):
        lines = [line for line in out.splitlines() if line.startswith(f"[waits    ] {kind} ")]
        assert lines and all("encoder forward measured here" in line for line in lines), lines[:1]


def _one_measurement(get):
    """Costs._get with the measuring time spent after its first measurement."""

    def one(self, key, measure):
        if self.got and key not in self.got:
            self.deadline = 0.0
        return get(self, key, measure)

    return one


def test_scoring_pairs_by_task_kind(tmp_path):
    """A candidate set's pairs are its captions; a retrieval set's every image with every
    caption; a zero-shot set's none (its prompts are unknown before it is built)."""
    from flowclip_cache.config import build, find_config, load_yaml
    from flowclip_cache.paper.budget import counts, eval_pairs
    from flowclip_cache.paper.paths import manifest_path
    from flowclip_cache.paper.plan import CONFIG

    cfg = build(CONFIG, load_yaml(find_config("paper")) | {"manifests": str(tmp_path / "m")}, "paper")
    needs = [manifest_path(cfg, n) for n in ("sugarcrepe", "coco-retrieval", "cifar10", "coco-train")]
    sc, coco = counts(cfg, "sugarcrepe"), counts(cfg, "coco-retrieval")
    assert eval_pairs(cfg, needs) == sc[1] + coco[0] * coco[1] == 2 * 7_511 + 5_000 * 25_000


def test_the_dry_run_ends_with_the_real_datas_sizes(tmp_path):
    """The closing tables: each image folder with the sources that read it, the catalogue's
    images (summed: an upper bound), its size measured when it is here (the files' bytes,
    counted independently below) or the publisher's stated download, else 'not here'; then
    each store's disk and time, each training study's time."""
    folder = tmp_path / "data" / "whatsup" / "data"
    folder.mkdir(parents=True)
    sizes = [1000, 2**20, 12345]
    for i, n in enumerate(sizes):
        (folder / f"{i}.jpg").write_bytes(b"x" * n)
    (folder / "sub").mkdir()
    (folder / "sub" / "a.jpg").write_bytes(b"y" * 777)
    out = _dry(tmp_path, *QUICK)
    tail = out.split("\nimage folders (under ")[1]
    rows = {line.split()[0]: line for line in tail.splitlines()[1:] if line.startswith("  ") and "read by" in line}
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    assert (
        f"{total / 2**20:.2f} MiB in 4 files (measured); read by whatsup-coco-spatial, whatsup-gqa-spatial"
        in (rows["whatsup/data"])
    )
    assert "<= 4,138 images" in rows["whatsup/data"]  # the catalogue's 2,687 + 1,451
    assert "not here; download 1 GB (cocodataset.org/#download); read by sugarcrepe" in rows["coco/val2017"]
    assert "not here; download train2014 13 GB + val2014 6 GB (cocodataset.org/#download)" in rows["coco"]
    assert "read by coco-train, aro-coco-order, abc6k, coco-retrieval" in rows["coco"]
    assert rows["imagenetv2"].split("<= 10,000 images")[1].split(";")[0].strip() == "not here"
    assert "images: counted once built" in rows["vg"]  # CREPE's count is the built manifest's
    stores = tail.split("stores (under ")[1].split("training and adapting")[0]
    assert "vit_b32" in stores and "GiB" in stores and "time not measured" in stores  # measure=false


def test_a_folder_is_counted_for_a_bounded_time(tmp_path):
    from flowclip_cache.paper.sizes import folder_bytes

    for i in range(5):
        (tmp_path / f"{i}.bin").write_bytes(b"z" * (i + 1))
    assert folder_bytes(str(tmp_path)) == (15, 5, True)
    assert folder_bytes(str(tmp_path), budget=-1.0) == (0, 0, False)  # past its budget: a lower bound, said so


def test_the_docs_sizes_tables_are_the_dry_runs(tmp_path):
    """docs/paper.md shows the image-folder and store tables as `flowclip run paper
    --dry-run data=/data measure=false` prints them (a source or size changed and not the
    page fails here)."""
    from conftest import ROOT

    r = CliRunner().invoke(main, ["run", "paper", "--dry-run", "data=/data", "measure=false",
                                  f"out={tmp_path}/paper", f"manifests={tmp_path}/m", "cache=cache"])  # fmt: skip
    assert r.exit_code == 0, r.output
    printed = r.output.split("\nimage folders")[1].split("training and adapting")[0]
    page = open(os.path.join(ROOT, "docs", "paper.md")).read()
    assert "image folders" + printed.rstrip("\n") + "\n...\n```" in page


def test_a_folder_it_may_not_read_makes_the_count_a_lower_bound(tmp_path, monkeypatch):
    import flowclip_cache.paper.sizes as sizes

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"1234")
    (tmp_path / "b").mkdir()
    real = os.scandir
    monkeypatch.setattr(sizes.os, "scandir", lambda p: real(p) if not str(p).endswith("b") else (_ for _ in ()).throw(
        PermissionError(p)))  # fmt: skip
    assert sizes.folder_bytes(str(tmp_path)) == (4, 1, False)
