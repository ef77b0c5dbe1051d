"""The README's main job, in a small configuration."""
import os

from click.testing import CliRunner

from flowclip_cache.cli import main


def test_demo_end_to_end(tmp_path):
    out = str(tmp_path / "demo")
    r = CliRunner().invoke(main, ["demo", "--out", out, "--images", "24", "--epochs", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    for f in ("results.json", "results.md", "records.parquet"):
        assert os.path.exists(os.path.join(out, "report", f))
    assert "| fixed | flow_hnb_cimr |" in r.output
    # a second run reuses the world and the store
    r = CliRunner().invoke(main, ["demo", "--out", out, "--images", "24", "--epochs", "1", "--quiet"])
    assert r.exit_code == 0 and "images:   0 new, 24 already stored" in r.output
