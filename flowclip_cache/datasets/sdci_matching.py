"""sDCI's matching test (facebookresearch/DCI 8326c97, dataset/densely_captioned_images/
dataset/scripts/run_clip_dense_cap_eval.py `run_dense_cap_test_on_model`, "CLIP Correct"):
each entry (a photo or a mask's crop, with its summary; datasets/_dci.py) against the
summaries of the other entries of its batch: the batches of 8 the release's DataLoader
makes in file order (shuffle=False; the last one shorter), across image boundaries.

Score, as the release computes it: torch.max over the batch's pooled image-caption scores
(get_pooled_groups' max over each other entry's bag, get_pooled_diag's min over the
entry's own on the diagonal; a one-summary bag is its summary), right when the index is
the entry's own (torch.max returns the first maximal index: a tie with
an earlier entry's summary is wrong, with a later one's right); clip_correct_tot / exs,
pooled over a subtest's entries. The release prints each subtest; flowclip's one number
is their mean (ours).

What the fixed batches imply: an entry's decision depends on which entries share its
batch, i.e. on the file order and the batch size. An image's whole photo and its crops
are consecutive, so most of an entry's competitors are crops of the same photo (hard),
and where a batch spans two photos some are from another (easy). The same entry, its
record otherwise unchanged, scores differently in another order or batch size: the
figure is this benchmark's alone, not comparable with retrieval over the test set."""

from . import _dci
from .base import Benchmark, BuildReport, RowErrors, Scoring


def _record(entries: list[dict], p: int) -> dict:
    """Entry p against its batch: the summaries (bags) of the batch's entries, in order."""
    start = p - p % _dci.BATCH
    batch = entries[start : start + _dci.BATCH]
    bags = [j for j, b in enumerate(batch) for _ in b["bag"]]
    return {"captions": [c for b in batch for c in b["bag"]], "bags": bags, "gold": p - start, "batch": p // _dci.BATCH}


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    return _dci.build(source, out, errors, "sdci-matching", _record)


BENCHMARK = Benchmark(
    name="sdci-matching",
    title="sDCI matching test (CLIP Correct within batches of 8, per subtest)",
    kind="candidates",
    build=build,
    scoring=Scoring(task="candidates", tie_rule="first", aggregate="subset_mean", group_by="subtest", pooled_bags=True),
)
