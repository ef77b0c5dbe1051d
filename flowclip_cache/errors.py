"""User-facing errors: the CLI prints their message and exits non-zero, without a traceback."""


class FlowclipError(Exception):
    """An error whose message tells the user what is wrong and what to do."""


class ManifestError(FlowclipError):
    pass


class StoreError(FlowclipError):
    pass


class FingerprintMismatch(StoreError):
    pass


class WeightsUnavailable(FlowclipError):
    pass


class SegmentDamaged(StoreError):
    """One part of a store (a segment, a Parquet record file) fails its checks."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


class StoreDamaged(StoreError):
    """The one-line refusal every command gives for a damaged store."""

    def __init__(self, root: str, problems: list[str]):
        self.root, self.problems = root, problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(
            f"{root} is damaged: {problems[0]}{more}. See `flowclip store verify {root}`; "
            f"`flowclip store verify --quarantine {root}` moves the damaged parts aside, and the next "
            f"`flowclip extract` re-encodes what they held"
        )
