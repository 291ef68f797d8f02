"""Private temporary folders of one process that outlive no process, even a killed one.

    folder = private_dir("tessera-artifacts-")   # mode 0700, in tempfile.gettempdir()

Note [private dirs]
A folder made with mkdtemp and removed by an atexit handler leaks when its process dies
without running atexit handlers: SIGKILL, SIGTERM without a handler, a crash, os._exit (how a
forked multiprocessing worker ends). Test runs and tuners that kill workers leave thousands.
So each folder holds a lock file that its process keeps locked (flock, on an open descriptor
never closed) for as long as it lives; the kernel drops the lock when the process dies, however
it dies. Whoever makes a folder with the same prefix first sweeps the prefix's folders: one whose
lock it can take belongs to a dead process, and is removed. The lock file gets its name only
once locked (made as `.lock.new`, locked, renamed), so a sweeper never takes the lock of a
folder whose owner is still setting it up. A folder without a lock file (an older tessera's,
or one whose owner died within that setup) is removed once it is older than
`UNLOCKED_GRACE_S`. flock works across PID namespaces and is immune to PID reuse, where a
"pid in the name, is it alive?" test is not.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
import time

LOCK = ".lock"
UNLOCKED_GRACE_S = 24 * 3600.0  # a folder with no lock file: an older tessera's, maybe alive
_held: dict[str, int] = {}  # folder -> the locked descriptor, open for the process's life


def private_dir(prefix: str, root: str | None = None) -> str:
    """A new folder private to this process (mode 0700), removed at exit, or by the next
    process that makes one with the same `prefix` if this one is killed (Note [private dirs]).
    Stale folders of `prefix` in `root` (default: the temp dir) are swept first."""
    root = root or tempfile.gettempdir()
    sweep_stale_dirs(prefix, root)
    folder = tempfile.mkdtemp(prefix=prefix, dir=root)
    fd = os.open(os.path.join(folder, LOCK + ".new"), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(os.path.join(folder, LOCK + ".new"), os.path.join(folder, LOCK))
    os.set_inheritable(fd, False)
    _held[folder] = fd
    atexit.register(_remove_own, folder, os.getpid())
    return folder


def _remove_own(folder: str, pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that inherited the handler
        shutil.rmtree(folder, ignore_errors=True)


def sweep_stale_dirs(prefix: str, root: str) -> list[str]:
    """Remove the folders `root/prefix*` of this user whose process is gone: their lock is free,
    or they have no lock file and are older than UNLOCKED_GRACE_S. Returns those removed."""
    removed = []
    try:
        names = [n for n in os.listdir(root) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        folder = os.path.join(root, name)
        if folder not in _held and _is_stale(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _is_stale(folder: str) -> bool:
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    if not os.path.isdir(folder) or os.path.islink(folder) or info.st_uid != os.getuid():
        return False
    try:
        fd = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        return time.time() - info.st_mtime > UNLOCKED_GRACE_S
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # locked: its process is alive
    finally:
        os.close(fd)  # also drops the lock taken, if any
    return True
