"""Nothing a command does destroys data it did not make."""

import errno
import os

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.scoring import score as score_mod
from flowclip_cache.scoring.score import run_score
from flowclip_cache.store.integrity import verify_store
from flowclip_cache.training import checkpoint
from flowclip_cache.training import loop as train_mod
from flowclip_cache.training.loop import TrainConfig, train_head


@pytest.fixture(scope="module")
def scored_world(tmp_path_factory, tiny_encoder):
    """A store, a sample and a finished flow run, shared by this module (none is modified)."""
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    base = tmp_path_factory.mktemp("outputs")
    s = make_sample(str(base / "s"), n_images=24)
    fs = FeatureStore.open_or_create(str(base / "store"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["candidates"], s["training"]], s["image_root"], workers=0, progress=False)
    fs.refresh()
    run = str(base / "flow")
    train_head(
        fs,
        s["training"],
        run,
        TrainConfig(head="flow", epochs=1, batch_size=8, lr=1e-3),
        progress=False,
        log=lambda *_: None,
    )
    return fs, s, run, base


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


quiet = dict(log=lambda *_: None)


def test_overwrite_never_replaces_a_store_or_a_users_folder(scored_world, tmp):
    fs, s, run, _ = scored_world
    mine = tmp / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    for out in (fs.root, str(mine)):
        with pytest.raises(FlowclipError, match="only its own output|never go inside a store"):
            run_score(fs, [s["candidates"]], ["clip"], out, overwrite=True, bootstrap_draws=0, **quiet)
        with pytest.raises(FlowclipError, match="only its own output|never go inside a store"):
            train_head(
                fs, s["training"], out, TrainConfig(head="global", epochs=1), overwrite=True, progress=False, **quiet
            )
        with pytest.raises(FlowclipError, match="not a train-head run folder|never go inside a store"):
            train_head(fs, s["training"], out, TrainConfig(head="global", epochs=1), progress=False, **quiet)
    assert (mine / "thesis.tex").read_text() == "years of work" and sorted(os.listdir(mine)) == ["thesis.tex"]
    assert verify_store(fs.root).problems == []
    # a score folder is not a run folder, nor the other way round
    res = str(tmp / "res")
    run_score(fs, [s["candidates"]], ["clip"], res, bootstrap_draws=0, **quiet)
    with pytest.raises(FlowclipError, match="is a score results folder, not a train-head run folder"):
        train_head(
            fs, s["training"], res, TrainConfig(head="global", epochs=1), overwrite=True, progress=False, **quiet
        )
    with pytest.raises(FlowclipError, match="is a train-head run folder, not a score results folder"):
        run_score(fs, [s["candidates"]], ["clip"], run, overwrite=True, bootstrap_draws=0, **quiet)
    run_score(fs, [s["candidates"]], ["clip"], res, overwrite=True, bootstrap_draws=0, **quiet)  # its own: fine


@pytest.mark.parametrize(
    "code,says",
    [(errno.ENOSPC, "disk is full"), (errno.EROFS, "file system is read-only"), (errno.EACCES, "permission denied")],
)
def test_failed_score_leaves_nothing_and_disk_full_is_one_line(scored_world, tmp, monkeypatch, code, says):
    fs, s, run, _ = scored_world

    def full_disk(*a, **k):
        raise OSError(code, os.strerror(code), str(tmp / "res"))

    monkeypatch.setattr(score_mod, "write_outputs", full_disk)
    r = CliRunner().invoke(
        main,
        [
            "score",
            "--store",
            fs.root,
            "--manifests",
            s["candidates"],
            "--scorer",
            "clip",
            "--out",
            str(tmp / "res"),
            "--bootstrap",
            "0",
        ],
    )
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    errors = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and says in errors[0] and str(tmp / "res") in errors[0]
    assert not [n for n in os.listdir(tmp) if n.startswith("res")]


def test_two_scores_to_one_out_never_replace_each_other(scored_world, tmp, monkeypatch):
    fs, s, run, _ = scored_world
    out = str(tmp / "res")
    real = score_mod._score_all

    def other_finishes_first(*a, **k):
        summary = real(*a, **k)
        monkeypatch.setattr(score_mod, "_score_all", real)
        run_score(fs, [s["candidates"]], ["clip"], out, bootstrap_draws=0, **quiet)  # the other command
        return summary

    monkeypatch.setattr(score_mod, "_score_all", other_finishes_first)
    with pytest.raises(FlowclipError, match="written by another command while this one ran"):
        run_score(fs, [s["candidates"]], [run], out, bootstrap_draws=0, **quiet)
    import json

    assert [x["run"] for x in json.load(open(os.path.join(out, "results.json")))["scorers"]] == ["clip"]
    assert not [n for n in os.listdir(tmp) if n.startswith("res.")]


def test_failed_train_head_leaves_no_run_folder(scored_world, tmp, monkeypatch):
    fs, s, run, _ = scored_world
    out = str(tmp / "fails")

    def broken(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(train_mod, "load_training_data", broken)
    with pytest.raises(OSError):
        train_head(fs, s["training"], out, TrainConfig(head="flow", epochs=1), progress=False, **quiet)
    assert not os.path.exists(out)


class Killed(BaseException):
    """A process death at one write (BaseException: nothing catches it on the way out)."""


def test_killed_at_each_checkpoint_write_resumes_exactly(scored_world, tmp, monkeypatch):
    """A kill at every file operation of a checkpoint save; resume must then see a whole
    checkpoint (the new or the previous) and finish with the uninterrupted weights."""
    fs, s, run, _ = scored_world
    cfg = TrainConfig(head="flow", epochs=2, batch_size=8, lr=1e-3, train_eval_records=8, checkpoint_every=1)
    ref = str(tmp / "ref")
    train_head(fs, s["training"], ref, cfg, progress=False, **quiet)
    want = load_file(os.path.join(ref, "head.safetensors"))
    ops = ["save_file", "replace", "fsync", "rmtree", "makedirs", "fsync_tree", "fsync_dir"]
    count = {"n": 0, "at": None}

    def wrap(fn):
        def inner(*a, **k):
            count["n"] += 1
            if count["n"] == count["at"]:
                raise Killed()
            return fn(*a, **k)

        return inner

    import safetensors.torch

    real = {
        "save_file": safetensors.torch.save_file,
        "replace": os.replace,
        "fsync": os.fsync,
        "rmtree": checkpoint.shutil.rmtree,
        "makedirs": os.makedirs,
        "fsync_tree": checkpoint.fsync_tree,
        "fsync_dir": checkpoint.fsync_dir,
    }
    # count the operations of a run that saves three times (steps 1, 2 and at the stop)
    monkeypatch.setattr(safetensors.torch, "save_file", wrap(real["save_file"]))
    monkeypatch.setattr(checkpoint.os, "replace", wrap(real["replace"]))
    monkeypatch.setattr(checkpoint.os, "fsync", wrap(real["fsync"]))
    monkeypatch.setattr(checkpoint.os, "makedirs", wrap(real["makedirs"]))
    monkeypatch.setattr(checkpoint.shutil, "rmtree", wrap(real["rmtree"]))
    monkeypatch.setattr(checkpoint, "fsync_tree", wrap(real["fsync_tree"]))
    monkeypatch.setattr(checkpoint, "fsync_dir", wrap(real["fsync_dir"]))
    probe = str(tmp / "probe")
    train_head(fs, s["training"], probe, cfg, progress=False, stop_after=2, **quiet)
    per_run = count["n"]
    assert per_run >= 2 * len(ops)
    for at in range(1, per_run + 1):  # a kill at every operation of the run's three saves
        victim = str(tmp / f"v{at}")
        count.update(n=0, at=at)
        with pytest.raises(Killed):
            train_head(fs, s["training"], victim, cfg, progress=False, stop_after=2, **quiet)
        count.update(n=0, at=None)
        train_head(fs, s["training"], victim, cfg, progress=False, resume=True, **quiet)
        got = load_file(os.path.join(victim, "head.safetensors"))
        for k in want:
            assert torch.equal(got[k], want[k]), (at, k)


def test_scorer_typos_and_mixed_seeds_are_named(scored_world, tmp):
    fs, s, run, base = scored_world
    typo = run[:-1] + "w_"  # .../flow -> .../flow_ does not exist
    with pytest.raises(FlowclipError, match=r"does not exist; did you mean .*flow\?"):
        run_score(fs, [s["candidates"]], [typo], str(tmp / "x"), bootstrap_draws=0, **quiet)
    other = str(base / "global0")
    if not os.path.exists(other):
        train_head(fs, s["training"], other, TrainConfig(head="global", epochs=1), progress=False, **quiet)
    with pytest.raises(FlowclipError, match=r"grouped as seeds of one method but differ in .*head \(flow vs global\)"):
        run_score(fs, [s["candidates"]], [f"m={run}", f"m={other}"], str(tmp / "y"), bootstrap_draws=0, **quiet)
    assert not os.path.exists(tmp / "x") and not os.path.exists(tmp / "y")


def test_only_the_marker_proves_ownership_and_adopt_is_explicit(scored_world, tmp):
    """A look-alike folder (config.json with store_fingerprint and train) is not a run:
    train-head --overwrite refuses it and deletes nothing; `flowclip adopt` marks it."""
    import json

    from flowclip_cache import outputs

    fs, s, _, _ = scored_world
    u = tmp / "U"
    u.mkdir()
    (u / "config.json").write_text(json.dumps({"store_fingerprint": "x", "train": {}}))
    (u / "thesis.txt").write_text("precious")
    (u / "data").mkdir()
    (u / "data" / "big.csv").write_text("1,2")
    (tmp / "res").mkdir()
    (tmp / "res" / "results.json").write_text(json.dumps({"store_fingerprint": "x", "results": {}}))
    assert outputs.kind_of(str(u)) is None and outputs.kind_of(str(tmp / "res")) is None
    args = [
        "train-head",
        "--store",
        fs.root,
        "--train",
        s["training"],
        "--head",
        "global",
        "--epochs",
        "1",
        "--out",
        str(u),
        "--overwrite",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "flowclip adopt" in r.output, r.output
    assert (u / "thesis.txt").read_text() == "precious" and (u / "data" / "big.csv").exists()
    r = CliRunner().invoke(main, ["adopt", str(u), "--kind", "head-run"])
    assert r.exit_code == 0 and outputs.kind_of(str(u)) == "head-run", r.output
    assert CliRunner().invoke(main, ["adopt", str(u), "--kind", "head-run"]).exit_code == 2  # once


def test_overwrite_replaces_only_what_the_command_wrote(scored_world, tmp):
    """A finished run and a score folder list what they wrote; --overwrite refuses, naming
    them, while other files are there, and replaces exactly the listed entries."""
    from flowclip_cache import outputs

    fs, s, _, _ = scored_world
    run, res = str(tmp / "run"), str(tmp / "res")
    cfg = TrainConfig(head="flow", epochs=1, batch_size=8)
    train_head(fs, s["training"], run, cfg, progress=False, **quiet)
    run_score(fs, [s["candidates"]], ["clip"], res, bootstrap_draws=0, **quiet)
    assert outputs.foreign_entries(run) == [] and outputs.foreign_entries(res) == []  # every entry listed
    for out in (run, res):
        open(os.path.join(out, "notes.txt"), "w").write("mine")
    with pytest.raises(FlowclipError, match=r"did not write there \(notes.txt\)"):
        train_head(fs, s["training"], run, cfg, overwrite=True, progress=False, **quiet)
    with pytest.raises(FlowclipError, match=r"did not write there \(notes.txt\)"):
        run_score(fs, [s["candidates"]], ["clip"], res, overwrite=True, bootstrap_draws=0, **quiet)
    assert open(os.path.join(run, "notes.txt")).read() == "mine" and os.path.exists(os.path.join(run, "DONE"))
    for out in (run, res):
        os.remove(os.path.join(out, "notes.txt"))
    train_head(fs, s["training"], run, cfg, overwrite=True, progress=False, **quiet)
    run_score(fs, [s["candidates"]], ["clip"], res, overwrite=True, bootstrap_draws=0, **quiet)
    assert os.path.exists(os.path.join(run, "DONE")) and os.path.exists(os.path.join(res, "results.json"))


def test_symlinked_out_and_stores_inside_outputs_are_refused(scored_world, tmp):
    fs, s, run, _ = scored_world
    import shutil

    mine = str(tmp / "run")
    shutil.copytree(run, mine)
    link = tmp / "link"
    link.symlink_to(mine)
    r = CliRunner().invoke(
        main,
        [
            "train-head",
            "--store",
            fs.root,
            "--train",
            s["training"],
            "--head",
            "global",
            "--epochs",
            "1",
            "--out",
            str(link),
            "--overwrite",
        ],
    )
    assert r.exit_code == 2 and "symbolic link" in r.output and os.path.exists(os.path.join(mine, "DONE"))
    # extract into a score results folder (or a user's non-empty folder): refused, nothing made
    res = str(tmp / "res")
    run_score(fs, [s["candidates"]], ["clip"], res, bootstrap_draws=0, **quiet)
    before = sorted(os.listdir(res))
    for where in (res, os.path.join(res, "inner")):
        r = CliRunner().invoke(
            main,
            [
                "extract",
                "--store",
                where,
                "--model",
                "flowclip-tiny-vit",
                "--pretrained",
                "none",
                "--manifest",
                s["candidates"],
                "--image-root",
                s["image_root"],
                "--workers",
                "0",
                "--quiet",
            ],
        )
        assert r.exit_code == 2 and "inside" in r.output, r.output
    assert sorted(os.listdir(res)) == before
    user = tmp / "user"
    user.mkdir()
    (user / "notes.txt").write_text("x")
    r = CliRunner().invoke(
        main,
        [
            "extract",
            "--store",
            str(user),
            "--model",
            "flowclip-tiny-vit",
            "--pretrained",
            "none",
            "--manifest",
            s["candidates"],
            "--image-root",
            s["image_root"],
            "--workers",
            "0",
        ],
    )
    assert r.exit_code == 2 and "holds other files" in r.output and os.listdir(user) == ["notes.txt"]
    # and no output inside a store
    with pytest.raises(FlowclipError, match="never go inside a store"):
        run_score(fs, [s["candidates"]], ["clip"], os.path.join(fs.root, "results"), bootstrap_draws=0, **quiet)


def test_a_marker_never_reaches_outside_its_folder(tmp):
    """A marker is data (perhaps a stranger's): entries like '../x' or '/x' are ignored, so
    --overwrite's removal stays inside the folder. Mutation checked: without the filter
    the sibling file is deleted."""
    import json

    from flowclip_cache import outputs

    out = tmp / "run"
    out.mkdir()
    (tmp / "precious.txt").write_text("keep")
    (out / outputs.MARKER).write_text(json.dumps({"kind": "head-run", "files": ["../precious.txt", "/etc/x", "."]}))
    outputs.remove_own(str(out))
    assert (tmp / "precious.txt").read_text() == "keep" and out.is_dir()


def test_overwrite_checks_the_whole_tree_not_just_the_top(scored_world, tmp):
    """A file a user put inside a run's checkpoint folder, or inside a score's figures,
    is someone else's as much as one beside them: --overwrite refuses, naming it, and
    deletes nothing. A marked run nested in a listed folder answers for itself."""
    from flowclip_cache import outputs

    fs, s, _, _ = scored_world
    run, res = str(tmp / "run"), str(tmp / "res")
    cfg = TrainConfig(head="flow", epochs=2, batch_size=8)
    train_head(fs, s["training"], run, cfg, progress=False, **quiet)
    assert outputs.foreign_entries(run) == []
    ckpt = next(n for n in os.listdir(run) if n.startswith("ckpt-"))
    open(os.path.join(run, ckpt, "notes.txt"), "w").write("mine")
    assert outputs.foreign_entries(run) == [f"{ckpt}/notes.txt"]
    with pytest.raises(FlowclipError, match=rf"did not write there \({ckpt}/notes.txt\)"):
        train_head(fs, s["training"], run, cfg, overwrite=True, progress=False, **quiet)
    assert open(os.path.join(run, ckpt, "notes.txt")).read() == "mine"
    # a folder published whole (score, explain, publish): every path inside it is recorded
    for n in (1, 2):
        os.makedirs(tmp / f"t{n}" / "records")
        (tmp / f"t{n}" / "records" / "r0.png").write_text("png")
        outputs.publish(str(tmp / f"t{n}"), res, "explain", overwrite=n == 2)
        assert outputs.foreign_entries(res) == []
        (tmp / "res" / "records" / "notes.txt").write_text("mine")
        assert outputs.foreign_entries(res) == ["records/notes.txt"]
        if n == 1:
            os.remove(tmp / "res" / "records" / "notes.txt")
    os.makedirs(tmp / "t3" / "records")
    with pytest.raises(FlowclipError, match=r"did not write there \(records/notes.txt\)"):
        outputs.publish(str(tmp / "t3"), res, "explain", overwrite=True)
    assert (tmp / "res" / "records" / "notes.txt").read_text() == "mine"
    # a marked output inside a listed folder (a study's runs/<run>/) is judged by its own
    # marker where the outer marker lists it; one copied in unlisted is foreign whole
    outer = tmp / "outer"
    (outer / "runs").mkdir(parents=True)
    outputs.mark(str(outer), "study", ["runs"])
    os.rename(run, outer / "runs" / "r0")
    assert outputs.foreign_entries(str(outer)) == ["runs/r0"]
    outputs.mark(str(outer), "study", ["runs"])  # (as a study records the runs it wrote)
    assert outputs.foreign_entries(str(outer)) == [f"runs/r0/{ckpt}/notes.txt"]
    os.remove(outer / "runs" / "r0" / ckpt / "notes.txt")
    assert outputs.foreign_entries(str(outer)) == []
    (outer / "runs" / "stray.txt").write_text("x")
    assert outputs.foreign_entries(str(outer)) == ["runs/stray.txt"]


def test_overwrite_never_deletes_an_output_copied_into_a_checkpoint(scored_world, tmp):
    """A flowclip output (its own marker inside) copied by the user into RUN/ckpt-N/:
    train-head --out RUN --overwrite refuses, naming it, and deletes nothing."""
    fs, s, _, _ = scored_world
    run = str(tmp / "run")
    cfg = TrainConfig(head="flow", epochs=1, batch_size=8)
    train_head(fs, s["training"], run, cfg, progress=False, **quiet)
    ckpt = next(n for n in os.listdir(run) if n.startswith("ckpt-"))
    copy = os.path.join(run, ckpt, "my-scores")
    os.makedirs(os.path.join(copy, "figures"))
    for name in ("results.json", "figures/a.png"):
        open(os.path.join(copy, name), "w").write("mine")
    from flowclip_cache import outputs

    outputs.mark(copy, "score-results", ["results.json", "figures"])
    with pytest.raises(FlowclipError, match=rf"did not write there \({ckpt}/my-scores\)"):
        train_head(fs, s["training"], run, cfg, overwrite=True, progress=False, **quiet)
    assert open(os.path.join(copy, "figures", "a.png")).read() == "mine"


def test_a_strangers_nested_paths_never_leave_the_folder(tmp):
    """Nested entries of a marker ('paths') are data too: '..' in any part is ignored."""
    import json

    from flowclip_cache import outputs

    out = tmp / "run"
    (out / "a").mkdir(parents=True)
    (out / "a" / "x").write_text("1")
    (out / outputs.MARKER).write_text(
        json.dumps({"kind": "head-run", "files": ["a"], "paths": ["a/../../precious.txt", "a/x", "/a/y"]})
    )
    (tmp / "precious.txt").write_text("keep")
    assert outputs.foreign_entries(str(out)) == []
    outputs.remove_own(str(out))
    assert (tmp / "precious.txt").read_text() == "keep" and not (out / "a").exists()


def test_the_marker_forgets_a_replaced_checkpoint(scored_world, tmp):
    """After --max-steps and --resume, the marker lists the checkpoint folder that exists,
    not the ones replaced; a look-alike folder of
    the user's named like a checkpoint is never removed."""
    from flowclip_cache import outputs

    fs, s, _, _ = scored_world
    run = str(tmp / "run")
    train_head(
        fs, s["training"], run, TrainConfig(head="flow", epochs=3, batch_size=8, max_steps=2), progress=False, **quiet
    )
    assert sorted(n for n in outputs.listed(run) if n.startswith("ckpt-")) == ["ckpt-00000000"]
    train_head(
        fs,
        s["training"],
        run,
        TrainConfig(head="flow", epochs=3, batch_size=8, max_steps=6),
        resume=True,
        progress=False,
        **quiet,
    )
    ckpts = sorted(n for n in os.listdir(run) if n.startswith("ckpt-"))
    assert len(ckpts) == 1 and ckpts != ["ckpt-00000000"]
    assert sorted(n for n in outputs.listed(run) if n.startswith("ckpt-")) == ckpts
    assert outputs.foreign_entries(run) == []
    # a folder of the user's named like a checkpoint is not the run's to remove
    os.makedirs(os.path.join(run, "ckpt-00000042"))
    (tmp / "run" / "ckpt-00000042" / "mine.txt").write_text("keep")
    train_head(
        fs,
        s["training"],
        run,
        TrainConfig(head="flow", epochs=3, batch_size=8, max_steps=9),
        resume=True,
        progress=False,
        **quiet,
    )
    assert (tmp / "run" / "ckpt-00000042" / "mine.txt").read_text() == "keep"
