"""The README's main job, in a small configuration."""

import os

from click.testing import CliRunner

from flowclip_cache.cli import main


def test_demo_end_to_end(tmp_path):
    out = str(tmp_path / "demo")
    r = CliRunner().invoke(main, ["demo", "--out", out, "--scenes", "60", "--epochs", "1"])
    assert r.exit_code == 0, r.output
    for f in ("summary.md", "summary.json", "profile.json", "score/results.json", "score/records.parquet"):
        assert os.path.exists(os.path.join(out, f)), f
    assert "## Fixed images" in r.output and "| flow_hnb_cimr |" in r.output
    # the grounded tiny CLIP with its own (standard) patches: no patch_readout in the store's encoder
    import json

    encoder = json.load(open(os.path.join(out, "store", "store.json")))["encoder"]
    assert encoder["model"] == "flowclip-tiny-clip-filip" and "patch_readout" not in encoder
    # the report links its evidence explorer
    assert "[explain/explorer.html](explain/explorer.html)" in open(os.path.join(out, "summary.md")).read()
    assert os.path.exists(os.path.join(out, "explain", "explorer.html"))
    # the synthetic groups (Winoground in miniature) scored with GroupMatch too, never as the official figure
    results = open(os.path.join(out, "score", "results.md")).read()
    assert (
        "### Test-time matching (not the official metric)" in results
        and "| synthetic-groups | flow_hnb_cimr" in results
    )
    ttm = json.load(open(os.path.join(out, "score", "results.json")))["results"]["real|clip"]["synthetic-groups"]
    assert 0 <= ttm["test_time_matching"]["group_match"] <= 1 and "group_match" not in ttm["metrics"]
    # a second run finds everything done
    r = CliRunner().invoke(main, ["demo", "--out", out, "--scenes", "60", "--epochs", "1"])
    assert r.exit_code == 0 and "the study is finished" in r.output
    assert open(os.path.join(out, "summary.md")).read().count("explain/explorer.html") == 2  # linked once
    # a summary written again without the link (a study re-summarised) gets it back
    from flowclip_cache.studies.demo import EXPLORER_LINK

    summary = os.path.join(out, "summary.md")
    without = open(summary).read().replace(EXPLORER_LINK, "")
    assert "explain/explorer.html" not in without
    open(summary, "w").write(without)
    r = CliRunner().invoke(main, ["demo", "--out", out, "--scenes", "60", "--epochs", "1"])
    assert r.exit_code == 0 and open(summary).read() == without + EXPLORER_LINK
    # a head of one's own beside the demo's: its world, store and runs reused, the new head trained and compared
    from conftest import doc_file

    (tmp_path / "bilinear.py").write_text(doc_file("plugins.md", "bilinear", "bilinear.py"))
    r = CliRunner().invoke(main, ["demo", "--out", out, "--scenes", "60", "--epochs", "1", "--head",
                                  f"mine={tmp_path / 'bilinear.py'}:Bilinear"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.output.count("[done   ]") == 3 and "[todo   ] mine" in r.output and "0 new images" in r.output
    assert "start (before training):" in r.output  # a plug-in is not told it scores as the frozen encoder
    boot = json.load(open(os.path.join(out, "summary.json")))["bootstrap"]
    assert {"mine - global", "mine - flow_hnb_cimr", "mine - filip-score"} <= set(boot["synthetic-swap-att"])


def json_of(out: str) -> dict:
    import json

    return json.load(open(os.path.join(out, "summary.json")))


def test_demo_report_reads_itself(tmp_path):
    """One seed: no spread; the controls explained; a conclusion from the intervals; the
    profile as a table with chance levels."""
    out = str(tmp_path / "demo")
    r = CliRunner().invoke(main, ["demo", "--out", out, "--scenes", "60", "--epochs", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    md = open(os.path.join(out, "summary.md")).read()
    assert "± 0.00" not in md and "one seed, so no spread" in md
    assert "**Shuffle**" in md and "## Conclusions" in md and "95% interval" in md
    assert "| chance | 50.0 | 50.0 | 50.0 | 50.0 | 20.0 |" in md and "docs/results-synthetic.md" in md
    # the conclusion points at the binding lab, and states its finding for this encoder and readout only
    assert "ask under which encoder, readout and world" in md
    assert "with flowclip-tiny-clip-filip and standard patches (this study's), all 12 of its binding" in md
    assert "frozen encoder profile (%)" in r.output and "{'accuracy'" not in r.output
    # the encoder's own local evidence, untrained, is a row and is compared with Flow-CLIP
    assert "| filip-score |" in md and "filip-score" in json_of(out)["bootstrap"]["synthetic-swap-att"].__repr__()
    # the image-choice and group stand-ins are scored (Real only: their controls read n/d, explained)
    import json

    res = json.load(open(os.path.join(out, "score", "results.json")))["results"]
    assert set(res["real|clip"]["synthetic-groups"]["metrics"]) == {"text", "image", "group"}
    assert res["real|clip"]["synthetic-image-choice"]["n"] > 0 and "synthetic-groups" not in res["shuffle|clip"]
    assert "| synthetic-groups |" in md and "n/d: not defined" in md


def test_demo_with_the_head_zoo(tmp_path):
    out = str(tmp_path / "zoo")
    r = CliRunner().invoke(main, ["demo", "--out", out, "--scenes", "60", "--epochs", "1", "--quiet", "--zoo"])
    assert r.exit_code == 0, r.output
    md = open(os.path.join(out, "summary.md")).read()
    for method in ("labclip", "filip", "fsc_local", "dcsm"):
        assert f"| {method} |" in md and f"{method} - flow_hnb_cimr" in md
