"""A writer's temporary folder, and how a later writer knows it is abandoned.

Each process that writes to a store makes one folder ``segments/.tmp-<host>-<pid>-<id>/``
and holds an exclusive ``flock`` on the ``lock`` file inside it for as long as it
lives. Segments and record files are written there and renamed into place. The
kernel drops the lock when the process ends, however it ends (SIGKILL, OOM, a full
disk), so a folder whose lock can be taken belongs to nobody and is swept by the next
writer. A folder whose lock cannot be taken belongs to a live writer and is left
alone. Where the filesystem cannot lock at all (some NFS mounts), nothing is swept.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import uuid

PREFIX = ".tmp-"


class WriterDir:
    def __init__(self, path: str, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def create(cls, segment_dir: str) -> "WriterDir":
        host = socket.gethostname().replace("-", "_")[:32] or "host"
        path = os.path.join(segment_dir, f"{PREFIX}{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.makedirs(path)
        fd = os.open(os.path.join(path, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return cls(path, fd)

    def release(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)

    @staticmethod
    def status(path: str) -> str:
        """'live' (a writer holds it), 'abandoned', 'legacy' (format 1: no lock file) or
        'unknown' (the filesystem cannot lock)."""
        lock = os.path.join(path, "lock")
        if not os.path.isdir(path) or not os.path.isfile(lock):
            return "legacy"
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            return "abandoned"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return "abandoned"
        except BlockingIOError:
            return "live"
        except OSError:
            return "unknown"
        finally:
            os.close(fd)

    @classmethod
    def sweep(cls, segment_dir: str) -> list[str]:
        """Remove abandoned writers' folders; returns what was removed. Each is taken
        under its own lock first, so two sweepers never race a live writer."""
        removed = []
        for name in sorted(os.listdir(segment_dir)) if os.path.isdir(segment_dir) else []:
            path = os.path.join(segment_dir, name)
            if not name.startswith(PREFIX) or not os.path.isfile(os.path.join(path, "lock")):
                continue
            try:
                fd = os.open(os.path.join(path, "lock"), os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # live (or no locking here): leave it
            try:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(name)
            finally:
                os.close(fd)
        return removed

    @classmethod
    def live(cls, segment_dir: str) -> list[str]:
        return [
            n
            for n in sorted(os.listdir(segment_dir))
            if n.startswith(PREFIX) and cls.status(os.path.join(segment_dir, n)) in ("live", "unknown")
        ]
