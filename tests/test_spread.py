"""A study spread over processes (flowclip_cache/studies/spread.py): two ranks under
torchrun train disjoint shares of the plan, each run claimed once, and the last one
writes the summary, equal to a one-process run's."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import ROOT

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.studies.spread import claim, my_groups, study_rank


def test_rank_from_torchrun_or_a_slurm_array(monkeypatch, tmp_path):
    for k in ("RANK", "WORLD_SIZE", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"):
        monkeypatch.delenv(k, raising=False)
    assert study_rank() == (0, 1)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "5")
    assert study_rank() == (2, 4)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert study_rank() == (1, 2)  # torchrun's names first
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(FlowclipError, match="outside the 2 ranks"):
        study_rank()
    assert my_groups(list("abcde"), 1, 2) == ["b", "d"] and my_groups(list("abcde"), 0, 1) == list("abcde")
    run = str(tmp_path / "runs" / "r")
    assert claim(run, 0, 2) and claim(run, 0, 2) and not claim(run, 1, 2)  # its own again; never another's


def test_two_ranks_under_torchrun_write_the_one_process_tables(lab, tmp_path):
    args = ["run", "ablation", f"store={lab['store']}", f"train={lab['training']}", f"eval=[{lab['candidates']}]",
            "seeds=[0]", "train_config.epochs=1", "train_config.batch_size=4", "bootstrap=200",
            "side_by_side=false"]  # fmt: skip
    r = CliRunner().invoke(main, [*args, f"out={tmp_path / 'one'}", "--quiet"])
    assert r.exit_code == 0, r.output
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ROOT}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    p = subprocess.run([*torchrun, "-m", "flowclip_cache", *args, f"out={tmp_path / 'two'}", "--quiet"], env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # (the rank that finishes first usually says the others are not yet done; when both finish
    # together, the lock lets one write the summary: either way one summary, checked below)
    assert p.stdout.count("runs to train here") == 2
    from flowclip_cache.studies.ablation import DEFAULT_HEADS
    from flowclip_cache.studies.study import RunSpec

    plan = [RunSpec(method, 0, dict(settings)).folder for method, settings in DEFAULT_HEADS.items()]
    claims = {n.removesuffix(".claim"): json.load(open(tmp_path / "two" / "runs" / n))["rank"]
              for n in os.listdir(tmp_path / "two" / "runs") if n.endswith(".claim")}  # fmt: skip
    assert claims == {folder: i % 2 for i, folder in enumerate(plan)}  # run i of the plan on rank i mod 2, once
    one, two = (json.load(open(tmp_path / d / "summary.json")) for d in ("one", "two"))
    for s in (one, two):
        s.pop("timing")
    assert one == two
    r = CliRunner().invoke(main, [*args, f"out={tmp_path / 'two'}"])
    assert r.exit_code == 0 and "the study is finished (summary in place)" in r.output


def test_extract_under_torchrun_puts_each_rank_on_its_own_gpu(monkeypatch, tmp_path):
    """--device cuda (or auto on a GPU machine) under torchrun is cuda:LOCAL_RANK, as for
    studies: every rank on cuda:0 was the bug. (No GPU here: the device is faked.)"""
    from types import SimpleNamespace

    import flowclip_cache.commands.extract as command
    import flowclip_cache.extraction.extract as extraction
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "s"), n_images=1)
    seen = {}
    monkeypatch.setattr(command, "device_name", lambda name: "cuda")
    monkeypatch.setattr(
        extraction, "run_extract", lambda *a, **k: seen.update(k) or SimpleNamespace(lines=lambda: [], failures=0)
    )
    args = ["extract", "--store", str(tmp_path / "store"), "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                      "--manifest",
            s["candidates"], "--image-root", s["image_root"], "--device", "cuda", "--quiet"]  # fmt: skip
    for local, device in ((None, "cuda"), ("3", "cuda:3")):
        if local is None:
            monkeypatch.delenv("LOCAL_RANK", raising=False)
        else:
            monkeypatch.setenv("LOCAL_RANK", local)
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
        assert seen["device"] == device
