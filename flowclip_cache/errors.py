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
