"""sDCI's negatives test (facebookresearch/DCI 8326c97, run_clip_dense_cap_eval.py
`run_dense_cap_test_on_model`, "neg_correct"): each entry (datasets/_dci.py) its summary
against its LLM-written negative: `pos_diag > neg_diag`, strict (a tie is wrong; in
all_swaps_pick5_first the lowest of its five summaries against the negative),
neg_correct_tot / exs pooled over a subtest's entries. The release prints each subtest;
flowclip's one number is their mean (ours). Unlike the matching test, an entry's decision
is its own: no batch enters it."""

from . import _dci
from .base import Benchmark, BuildReport, RowErrors, Scoring


def _record(entries: list[dict], p: int) -> dict:
    """Entry p's summary (bag) against its negative."""
    e = entries[p]
    return {"captions": [*e["bag"], e["negative"]], "bags": [0] * len(e["bag"]) + [1], "gold": 0}


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    return _dci.build(source, out, errors, "sdci-negatives", _record)


BENCHMARK = Benchmark(
    name="sdci-negatives",
    title="sDCI negatives test (summary above its negative, per subtest)",
    kind="candidates",
    build=build,
    scoring=Scoring(task="candidates", tie_rule="wrong", aggregate="subset_mean", group_by="subtest", pooled_bags=True),
)
