"""The paper: `flowclip run paper` as a plan of steps, and its tables and figures.

Reads the plan's outputs (manifests, stores, studies, scores, adapted encoders) and the
published numbers (`published/`); writes OUT/paper/ (Tabs. 1-7, Figs. 3 and 7, sec43.md,
a CSV per table). Entry point: `plan.py` (the study kind `paper`), run by `runner.py`;
`inputs.py` reads the steps' outputs for `tables.py`, `tables_heads.py` and `figures.py`."""
