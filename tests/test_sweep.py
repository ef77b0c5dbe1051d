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
from flowclip_cache.sweep import folder_name

optuna = pytest.importorskip("optuna", reason="flowclip sweep needs Optuna (pip install 'flowclip[sweep]')")


def write_config(lab, path, out, **more):
    lines = [
        "# flowclip sweep sweep.yaml",
        f"out: {out}",
        f"store: {lab['store']}",
        f"train: {lab['training']}",
        f"validation: {lab['candidates']}",
        "trials: 3",
        "train_config: {head: flow, epochs: 12, batch_size: 4}",
        "space:",
        "  lr: {low: 1.0e-4, high: 1.0e-2, log: true}",
        "  cimr: {choices: [0.0, 0.1]}",
        *[f"{k}: {v}" for k, v in more.items()],
    ]
    path.write_text("\n".join(lines) + "\n")


def test_killed_sweep_resumes_without_repeating_a_finished_trial(lab, tmp_path):
    cfg, out = tmp_path / "sweep.yaml", tmp_path / "sw"
    write_config(lab, cfg, out)
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
            res = json.load(open(out / "scores" / name / "results.json"))["results"][f"real|{name}"]
            assert t.value == pytest.approx(next(iter(res.values()))["score"])
    # the best settings as a study flowclip run accepts (one seed here)
    best = (out / "best.yaml").read_text()
    assert best.startswith(f"# flowclip run {out}/best.yaml") and "kind: ablation" in best
    r = CliRunner().invoke(main, ["run", str(out / "best.yaml"), "seeds=[0]", "bootstrap=0", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "| best |" in r.output and (out / "best-study" / "STUDY_DONE").exists()


def test_a_bad_search_space_is_one_line_before_any_trial(lab, tmp_path):
    for space, message in [
        ("{lrr: {low: 0.1, high: 1.0}}", "unknown keys ['lrr']"),
        ("{lr: {low: 1.0, high: 0.1}}", "space.lr: needs numbers low < high"),
        ("{lr: {low: 0.0, high: 0.1, log: true}}", "and low > 0 with log"),
        ("{head_options.rank: {low: 2, high: 8, int: true}}", "not options of the flow head"),
        ("{}", "nothing to search"),
    ]:
        cfg = tmp_path / "s.yaml"
        text = (
            f"out: {tmp_path / 'sw'}\nstore: {lab['store']}\ntrain: {lab['training']}\n"
            f"validation: {lab['candidates']}\nspace: {space}\n"
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
