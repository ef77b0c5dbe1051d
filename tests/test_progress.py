"""Progress bars show rate and ETA on a terminal, and nothing otherwise or under --quiet."""

import io

from flowclip_cache import progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _run(monkeypatch, stream, enabled):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setattr(progress.sys, "stderr", stream)
    b = progress.bar(100, "train", "step", enabled)
    for _ in range(100):
        b.update(1)
    b.refresh()  # (tqdm redraws at most every 0.1 s)
    b.close()
    return stream.getvalue()


def test_bar_on_a_terminal_only(monkeypatch):
    shown = _run(monkeypatch, Terminal(), True)
    assert "train" in shown and "step/s" in shown and "100/100" in shown
    assert _run(monkeypatch, io.StringIO(), True) == ""  # a log file or a pipe: nothing
    assert _run(monkeypatch, Terminal(), False) == ""  # --quiet
