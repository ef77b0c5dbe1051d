"""flowclip sweep (docs/sweep.md): an Optuna search over a head's settings, every trial a
run folder; killed, it resumes without repeating a finished trial; the best settings are
a study YAML that flowclip run accepts."""

import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from flowclip_cache.cli import main
from flowclip_cache.studies.sweep_trial import folder_name
from flowclip_cache.training import checkpoint

optuna = pytest.importorskip("optuna", reason="flowclip sweep needs Optuna (pip install 'flowclip[sweep]')")


@pytest.fixture(scope="module")
def halves(lab, tmp_path_factory):
    """The sample's candidate set split by image: one half to select on, one to report on."""
    from flowclip_cache.manifest import Manifest, split_by_image, write_manifest

    root = tmp_path_factory.mktemp("halves")
    m = Manifest.read(lab["candidates"])
    a, b = split_by_image(m, 0.5, 0)
    write_manifest(root / "select.parquet", a, m.kind, m.meta)
    write_manifest(root / "report.parquet", b, m.kind, m.meta)
    return {"select": str(root / "select.parquet"), "report": str(root / "report.parquet")}


def write_config(lab, path, out, halves, **more):
    lines = [
        "# flowclip sweep sweep.yaml",
        f"out: {out}",
        f"store: {lab['store']}",
        f"train: {lab['training']}",
        f"validation: {halves['select']}",
        f"eval: [{halves['report']}]",
        "trials: 3",
        "train_config: {head: flow, epochs: 4, batch_size: 4}",
        "space:",
        "  lr: {low: 1.0e-4, high: 1.0e-2, log: true}",
        "  cimr: {choices: [0.0, 0.1]}",
        *[f"{k}: {v}" for k, v in more.items()],
    ]
    path.write_text("\n".join(lines) + "\n")


def test_killed_sweep_resumes_without_repeating_a_finished_trial(lab, halves, tmp_path):
    cfg, out = tmp_path / "sweep.yaml", tmp_path / "sw"
    write_config(lab, cfg, out, halves)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ROOT}
    cmd = [sys.executable, "-m", "flowclip_cache", "sweep", str(cfg)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    seen = []
    for line in p.stdout:  # kill -9 as the second trial starts training
        seen.append(line)
        if line.startswith("trial 1: training"):
            p.send_signal(signal.SIGKILL)
            break
    p.wait()
    assert p.returncode == -signal.SIGKILL, seen
    first = seen[1].split(": ", 1)[1].split(" ->")[0]  # trial 0's settings, finished
    done = out / "trials" / first / "DONE"
    stamp = done.stat().st_mtime_ns
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trial 1 was interrupted: tried again with its settings" in r.stdout
    assert f"training {first}" not in r.stdout and done.stat().st_mtime_ns == stamp  # never repeated
    study = optuna.load_study(study_name="flowclip-sweep", storage=f"sqlite:///{out}/optuna.db")
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 3 and states.count("FAIL") == 1, states
    interrupted = next(t for t in study.trials if t.state.name == "FAIL")
    retried = [t for t in study.trials if t.state.name == "COMPLETE" and t.params == interrupted.params]
    assert len(retried) == 1  # the killed trial's settings, tried again
    for t in study.trials:
        if t.state.name == "COMPLETE":  # every value is its trial's validation score, read back
            name = folder_name(t.params)
            res = json.load(open(out / "scores" / name / "results.json"))["results"]["real|trial"]
            assert t.value == pytest.approx(next(iter(res.values()))["score"])
    # the best settings as a study flowclip run accepts (one seed here)
    best = (out / "best.yaml").read_text()
    assert best.startswith(f"# flowclip run {out}/best.yaml") and "kind: ablation" in best
    assert "# eval: manifests the sweep did not select on" in best and f"- {halves['report']}" in best
    r = CliRunner().invoke(main, ["run", str(out / "best.yaml"), "seeds=[0]", "bootstrap=0", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "| best |" in r.output and (out / "best-study" / "STUDY_DONE").exists()


def test_a_bad_search_space_is_one_line_before_any_trial(lab, halves, tmp_path):
    copy = tmp_path / "copy" / "select.parquet"  # the selection manifest's bytes under another name
    copy.parent.mkdir()
    copy.write_bytes(open(halves["select"], "rb").read())
    report = f"eval: [{halves['report']}]"
    for space, message, more in [
        ("{lrr: {low: 0.1, high: 1.0}}", "unknown keys ['lrr']", report),
        ("{lr: {low: 1.0, high: 0.1}}", "space.lr: needs numbers low < high", report),
        ("{lr: {low: 0.0, high: 0.1, log: true}}", "and low > 0 with log", report),
        ("{head_options.rank: {low: 2, high: 8, int: true}}", "not options of the flow head", report),
        ("{}", "nothing to search", report),
        # the report split: never what the sweep selects on (unless asked, and labelled)
        ("{lr: {low: 0.001, high: 0.1}}", "give eval: [MANIFEST...], what the best settings are reported on", ""),
        ("{lr: {low: 0.001, high: 0.1}}", "is what the sweep selects on", f"eval: [{halves['select']}]"),
        ("{lr: {low: 0.001, high: 0.1}}", f"eval: {copy} is what the sweep selects on", f"eval: [{copy}]"),
        ("{lr: {low: 0.001, high: 0.1}}", f"eval: {copy.parent} is what", f"eval: [{copy.parent}]"),
        ("{lr: {low: 0.001, high: 0.1}}", "sampler: grid needs {choices: [...]}", report + "\nsampler: grid"),
        ("{lr: {low: 0.001, high: 0.1}}", "key 'sampler': must be one of", report + "\nsampler: cmaes"),
        ("{lr: {low: 0.001, high: 0.1}}", "key 'direction': must be one of", report + "\ndirection: up"),
        ("{lr: {low: 0.001, high: 0.1}}", "give a trial's seeds as trial_seeds", report + "\ntrain_config: {seed: 1}"),
    ]:
        cfg = tmp_path / "s.yaml"
        text = (
            f"out: {tmp_path / 'sw'}\nstore: {lab['store']}\ntrain: {lab['training']}\n"
            f"validation: {halves['select']}\nspace: {space}\n{more}\n"
        )
        cfg.write_text(text)
        r = CliRunner().invoke(main, ["sweep", str(cfg)])
        assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
        assert not (tmp_path / "sw").exists()


def test_a_plug_in_heads_options_are_searched_and_the_best_trial_published(lab, tmp_path):
    """The search reaches a plug-in head's own options (head_options.NAME) and loss weights;
    the objective without a validation manifest is the val split's pairwise accuracy; the
    best trial's run folder is published as it is."""
    from conftest import doc_file

    head = doc_file("plugins.md", "bilinear", "bilinear.py")
    (tmp_path / "bilinear.py").write_text(head)
    out = tmp_path / "sw"
    (tmp_path / "s.yaml").write_text(
        f"out: {out}\nstore: {lab['store']}\ntrain: {lab['training']}\neval: [{lab['candidates']}]\ntrials: 2\n"
        f"plugins: [{tmp_path / 'bilinear.py'}]\ntrain_config: {{head: bilinear, epochs: 1, batch_size: 4}}\n"
        "space:\n  head_options.rank: {choices: [4, 8]}\n  loss_weights.uv_norm: {low: 0.001, high: 0.1, log: true}\n"
    )
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "s.yaml")])
    assert r.exit_code == 0, r.output
    study = optuna.load_study(study_name="flowclip-sweep", storage=f"sqlite:///{out}/optuna.db")
    best = study.best_trial
    run = out / "trials" / folder_name(best.params)
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["head"]["options"] == {"rank": best.params["head_options.rank"]}
    assert cfg["train"]["loss_weights"] == {"uv_norm": best.params["loss_weights.uv_norm"]}
    state = json.loads(open(run / "DONE").read())
    assert best.value == state["val"]["all"]  # the val split's pairwise accuracy
    assert "head_options:\n      rank:" in (out / "best.yaml").read_text()
    r = CliRunner().invoke(main, ["publish", str(run), "--out", str(tmp_path / "pub")])
    assert (
        r.exit_code == 0
        and (tmp_path / "pub" / "head.safetensors").read_bytes() == (run / "head.safetensors").read_bytes()
    )
    card = (tmp_path / "pub" / "README.md").read_text()  # its Use snippet loads the plug-in's code
    assert "flowclip score --plugin bilinear.py --store" in card and 'fc.load_plugin("bilinear.py")' in card
    assert "selected by a `flowclip sweep` as its best trial" in card


def test_reporting_on_the_selection_split_is_asked_for_and_labelled(lab, tmp_path):
    """fc.sweep from Python; eval_on_selection: true reports on the validation manifest, and
    best.yaml and its study folder say the scores are biased upward. --timeout stops starting
    trials; a rerun goes on without training a finished one again."""
    import flowclip_cache as fc

    out = tmp_path / "sw"
    space = {"lr": {"choices": [1.0e-3, 1.0e-2]}}
    common = dict(validation=lab["candidates"], eval_on_selection=True, train_config={"head": "global", "epochs": 1},
                  seeds=[0], sampler="grid", quiet=True)  # fmt: skip
    best = fc.sweep(str(out), lab["store"], lab["training"], space, trials=2, timeout=1e-9, **common)
    study = optuna.load_study(study_name="flowclip-sweep", storage=f"sqlite:///{out}/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE"]  # the timeout passed after one trial
    assert best["on_selection"] and best["trial"] == 0
    text = (out / "best.yaml").read_text()
    assert "its scores are biased upward" in text and "best-study-on-selection-split" in text
    assert f"- {lab['candidates']}" in text
    first = out / "trials" / folder_name(study.trials[0].params) / "DONE"
    stamp = first.stat().st_mtime_ns
    fc.sweep(str(out), lab["store"], lab["training"], space, trials=2, **common)
    study = optuna.load_study(study_name="flowclip-sweep", storage=f"sqlite:///{out}/optuna.db")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"] and first.stat().st_mtime_ns == stamp
    assert {t.params["lr"] for t in study.trials} == {1.0e-3, 1.0e-2}  # the grid: each point once


def test_a_trial_over_several_seeds_is_their_mean_with_the_spread_recorded(lab, tmp_path):
    import flowclip_cache as fc

    out = tmp_path / "sw"
    fc.sweep(str(out), lab["store"], lab["training"], {"lr": {"choices": [0.1]}}, validation=lab["candidates"],
             eval_on_selection=True, trials=1, trial_seeds=[0, 1, 2], sampler="grid", quiet=True,
             train_config={"head": "flow", "epochs": 4, "batch_size": 4})  # fmt: skip
    (trial,) = optuna.load_study(study_name="flowclip-sweep", storage=f"sqlite:///{out}/optuna.db").trials
    values = []
    for seed in (0, 1, 2):
        name = f"{folder_name(trial.params)}__seed-{seed}"
        assert json.loads((out / "trials" / name / "config.json").read_text())["train"]["seed"] == seed
        res = json.load(open(out / "scores" / name / "results.json"))["results"]["real|trial"]
        values.append(next(iter(res.values()))["score"])
    assert len(set(values)) > 1  # (the seeds disagree here, so the spread is tested)
    mean = sum(values) / 3
    assert trial.user_attrs["values"] == pytest.approx(values) and trial.value == pytest.approx(mean)
    assert trial.user_attrs["spread"] == pytest.approx((sum((v - mean) ** 2 for v in values) / 2) ** 0.5)


def test_ties_are_broken_by_the_stated_rule_not_trial_order():
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    from flowclip_cache.studies.sweep import best_trial

    dist = {"lr": FloatDistribution(0.0, 1.0)}
    for direction, values in [("maximize", [0.7, 0.9, 0.9, 0.9]), ("minimize", [0.9, 0.2, 0.2, 0.2])]:
        study = optuna.create_study(direction=direction)
        for i, (value, spread) in enumerate(zip(values, [0.0, 0.05, 0.01, 0.01])):
            study.add_trial(create_trial(value=value, params={"lr": i / 10}, distributions=dist,
                                         user_attrs={"spread": spread}))  # fmt: skip
        best, tied = best_trial(study, direction)
        assert best.number == 2 and sorted(t.number for t in tied) == [1, 3]  # smaller spread, then earlier


def test_a_pruned_trial_stops_at_its_epoch_and_counts_as_finished(lab, tmp_path):
    """The objective handed to a user's own Optuna study reports each epoch's val accuracy
    (the run's own figures); the study's pruner stops the run there, its checkpoint kept."""
    import flowclip_cache as fc

    class PruneAtTwo(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return max(trial.intermediate_values, default=0) >= 2

    out = tmp_path / "sw"
    objective = fc.sweep_objective(str(out), lab["store"], lab["training"], {"lr": {"low": 1e-3, "high": 1e-2}},
                                   train_config={"head": "global", "epochs": 4})  # fmt: skip
    study = optuna.create_study(pruner=PruneAtTwo(), direction="maximize")
    study.optimize(objective, n_trials=1)
    (trial,) = study.trials
    assert trial.state.name == "PRUNED" and sorted(trial.intermediate_values) == [1, 2]
    run = out / "trials" / folder_name(trial.params)
    evals = [json.loads(line)["eval"] for line in open(run / "log.jsonl") if '"eval"' in line]
    assert [trial.intermediate_values[e["epoch"]] for e in evals[1:]] == [e["val"]["all"] for e in evals[1:]]
    assert not (run / "DONE").exists() and checkpoint.read_state(str(run))["epoch"] == 2


def test_the_median_pruner_needs_a_val_split(lab, halves, tmp_path):
    from flowclip_cache.studies.sweep import _pruner
    from flowclip_cache.studies.sweep_trial import SweepConfig

    cfg = SweepConfig(out="x", store="s", train="t", pruner="median", pruner_options={"n_startup_trials": 1})
    pruner = _pruner(cfg)
    assert isinstance(pruner, optuna.pruners.MedianPruner) and pruner._n_startup_trials == 1
    import pyarrow.compute as pc

    from flowclip_cache.manifest import Manifest, write_manifest

    m = Manifest.read(lab["training"])  # its train split only
    write_manifest(tmp_path / "train.parquet", m.table.filter(pc.equal(m.table["split"], "train")), m.kind, m.meta)
    (tmp_path / "s.yaml").write_text(
        f"out: {tmp_path / 'sw'}\nstore: {lab['store']}\ntrain: {tmp_path / 'train.parquet'}\n"
        f"eval: [{halves['report']}]\n"
        "pruner: median\nspace: {lr: {low: 0.001, high: 0.1}}\n"
    )
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "s.yaml")])
    assert r.exit_code == 2 and "watches the val accuracy per epoch" in r.output, r.output


def test_manifest_split_puts_each_image_on_one_side_whatever_the_row_order(lab, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from flowclip_cache.manifest import Manifest, write_manifest

    m = Manifest.read(lab["candidates"])
    write_manifest(tmp_path / "reversed.parquet", m.table.take(list(range(m.table.num_rows))[::-1]), m.kind, m.meta)
    parts = {}
    for name in ("candidates", "reversed"):
        src = lab["candidates"] if name == "candidates" else tmp_path / "reversed.parquet"
        a, b = tmp_path / f"{name}-a.parquet", tmp_path / f"{name}-b.parquet"
        r = CliRunner().invoke(main, ["manifest", "split", str(src), "--out-a", str(a), "--out-b", str(b)])
        assert r.exit_code == 0, r.output
        parts[name] = [sorted(pq.read_table(p).column("record_id").to_pylist()) for p in (a, b)]
        images = [set(pq.read_table(p).column("image").to_pylist()) for p in (a, b)]
        assert images[0] and images[1] and not images[0] & images[1]
        assert sum(map(len, parts[name])) == m.table.num_rows and Manifest.read(a).kind == "candidates"
    assert parts["candidates"] == parts["reversed"]  # a row's side depends on its image alone
    r = CliRunner().invoke(main, ["manifest", "split", lab["candidates"], "--out-a", str(a), "--out-b", str(b)])
    assert r.exit_code == 2 and "exists; give a new file" in r.output
    c = str(tmp_path / "c.parquet")
    r = CliRunner().invoke(main, ["manifest", "split", lab["candidates"], "--out-a", c, "--out-b", c])
    assert r.exit_code == 2 and "give two new files" in r.output and not os.path.exists(c)
    import flowclip_cache.manifest as manifest_module  # the second part fails: neither is left

    real, calls = manifest_module.write_manifest, []

    def second_fails(path, *args):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real(path, *args)

    monkeypatch.setattr(manifest_module, "write_manifest", second_fails)
    d, e = str(tmp_path / "d.parquet"), str(tmp_path / "e.parquet")
    r = CliRunner().invoke(main, ["manifest", "split", lab["candidates"], "--out-a", d, "--out-b", e])
    assert r.exit_code != 0 and calls == [d, e] and not os.path.exists(d) and not os.path.exists(e)


def test_a_generation_of_trials_trains_side_by_side_as_the_trials_would_alone(lab, tmp_path, monkeypatch):
    """jobs: 3 asks the sampler for three trials at once and trains their runs in one
    side-by-side call (stack: the batched step); each trial's value is the one it has in a
    sweep of one trial at a time."""
    import flowclip_cache as fc
    from flowclip_cache.training import loop

    calls = []
    real = loop.train_heads
    monkeypatch.setattr(
        loop, "train_heads", lambda store, man, runs, **kw: calls.append(len(runs)) or real(store, man, runs, **kw)
    )
    shared = dict(validation=lab["candidates"], eval_on_selection=True, trials=3, sampler="grid", quiet=True,
                  train_config={"head": "flow", "epochs": 1, "batch_size": 4})  # fmt: skip
    space = {"lr": {"choices": [0.05, 0.01, 0.002]}}
    values = {}
    for name, more in {"one": {}, "three": {"jobs": 3}, "stacked": {"jobs": 3, "stack": True}}.items():
        calls.clear()
        fc.sweep(str(tmp_path / name), lab["store"], lab["training"], space, **shared, **more)
        trials = optuna.load_study(study_name="flowclip-sweep", storage=f"sqlite:///{tmp_path / name}/optuna.db").trials
        values[name] = {t.params["lr"]: t.value for t in trials}
        assert calls == ([3] if more else [1, 1, 1]), (name, calls)
    assert values["three"] == values["one"] and len(set(values["one"].values())) > 1
    assert values["stacked"] == pytest.approx(values["one"], abs=1e-6)
    lines = [f"out: {tmp_path}/x", f"store: {lab['store']}", f"train: {lab['training']}",
             f"validation: {lab['candidates']}", f"eval: [{lab['candidates']}]", "eval_on_selection: true",
             "jobs: 2", "pruner: median", "space: {lr: {low: 0.001, high: 0.1}}"]  # fmt: skip
    (tmp_path / "x.yaml").write_text("\n".join(lines) + "\n")
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "x.yaml")])
    assert r.exit_code == 2 and "needs jobs: 1" in r.output, r.output
