"""A study's runs spread over processes (docs/studies.md, "Many GPUs, many nodes"): the
processes a user starts with torchrun (RANK, WORLD_SIZE, LOCAL_RANK) or as a Slurm job
array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) run the same study command on the
same folder; rank r trains the run groups i with i = r mod N of the plan (a group: the
runs that train side by side on the same batches), each group's folders claimed so that
two ranks never train one run. The summary is written once every run has finished, by
the rank that finishes last (or by any rerun). No process group is needed: the ranks
meet only through the study folder, which must be on a file system they share."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket

from ..errors import FlowclipError


def study_rank() -> tuple[int, int]:
    """(rank, number of ranks) of this process: torchrun's, a Slurm array's, else (0, 1)."""
    env = os.environ
    if "WORLD_SIZE" in env and "RANK" in env:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    elif "SLURM_ARRAY_TASK_COUNT" in env and "SLURM_ARRAY_TASK_ID" in env:
        first = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        rank, world = int(env["SLURM_ARRAY_TASK_ID"]) - first, int(env["SLURM_ARRAY_TASK_COUNT"])
    else:
        return 0, 1
    if not 0 <= rank < world:
        raise FlowclipError(f"rank {rank} is outside the {world} ranks the environment names")
    return rank, world


def my_groups(groups: list, rank: int, world: int) -> list:
    return [g for i, g in enumerate(groups) if i % world == rank]


def claim(run_dir: str, rank: int, world: int) -> bool:
    """This rank's claim on a run folder (a file beside it, created exclusively). A claim
    made by this same rank of the same number of ranks (a crash, rerun) is taken over; one
    of another rank is left to it."""
    path = run_dir.rstrip(os.sep) + ".claim"
    mine = {"rank": rank, "world": world}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        try:
            held = json.load(open(path))
        except (OSError, ValueError):
            return False  # being written by another rank this moment
        return {k: held.get(k) for k in mine} == mine
    with os.fdopen(fd, "w") as f:
        json.dump({**mine, "host": socket.gethostname(), "pid": os.getpid()}, f)
    return True


@contextlib.contextmanager
def one_at_a_time(folder: str, name: str):
    """An exclusive lock (flock) on folder/.NAME.lock: ranks wait for each other here."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f".{name}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
