"""Scoring: every benchmark manifest under every scorer, by the benchmark's official rule.

Reads the store, manifests and run folders (a scorer is the frozen encoder or a trained
head); writes a score's results (results.json/.md/.csv, per-record scores, figures), and
`explain`'s token maps and explorer. Entry point: `score.py` (`run_score`); `engines.py`
scores one task kind, `aggregation.py` applies the benchmark's `Scoring`, `metrics.py`
and `stats.py` are the pure functions beneath."""
