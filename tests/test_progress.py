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


def test_stages_count_their_own_time_only(monkeypatch):
    """Nested stages: the outer one counts its time less the inner one's, so stages add up
    to the wall; a worker thread's stage counts nothing; since= gives one study's share."""
    import threading

    clock = iter([1.0, 4.0, 6.0, 10.0, 11.0, 13.0])  # perf_counter at each call, in order
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(progress, "_STAGE_SECONDS", {"steps": 5.0})
    before = progress.stage_seconds()  # (nothing open: no clock read)
    with progress.stage("scoring"):  # opens at 1.0
        with progress.stage("loading"):  # 4.0 to 6.0
            worker = threading.Thread(target=lambda: progress.stage("loading").__enter__())
            worker.start()
            worker.join()
    # scoring closes at 10.0: 3.0 before loading and 4.0 after it
    assert progress.stage_seconds(before) == {"scoring": 7.0, "loading": 2.0}
    with progress.stage("steps"):  # 11.0 to 13.0
        pass
    assert progress.stage_seconds() == {"steps": 7.0, "scoring": 7.0, "loading": 2.0}
    assert progress.stage_line({"steps": 2.0, "loading": 1.0}, 3.5) == (
        "Where the time went: steps 2.0 s, loading 1.0 s; the rest 0.5 s."
    )
