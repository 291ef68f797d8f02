"""A process's private temp folders do not outlive it, even when it is killed (Note [private
dirs] in tessera/runtime/private_dirs.py): the next process with the same prefix sweeps them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tessera.runtime.private_dirs import UNLOCKED_GRACE_S, private_dir, sweep_stale_dirs

PREFIX = "tessera-test-private-"


def _python(code: str, root, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(root))  # tempfile.gettempdir() of the child
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kwargs
    )


def _dirs(root, prefix) -> set[str]:
    return {p.name for p in root.iterdir() if p.name.startswith(prefix)}


def test_a_killed_process_folder_is_swept_and_a_live_one_kept(tmp_path):
    make = f"from tessera.runtime.private_dirs import private_dir; print(private_dir({PREFIX!r}))"
    killed = _python(make + "; import os, signal; os.kill(os.getpid(), signal.SIGKILL)", tmp_path)
    dead_dir = killed.stdout.readline().strip()
    assert killed.wait() == -signal.SIGKILL
    assert os.path.isdir(dead_dir)  # its atexit handler never ran
    alive = _python(make + "; import sys; sys.stdin.read()", tmp_path, stdin=subprocess.PIPE)
    live_dir = alive.stdout.readline().strip()
    try:
        assert not os.path.exists(dead_dir)  # swept by the next process of the prefix
        mine = private_dir(PREFIX, root=str(tmp_path))
        assert os.path.isdir(live_dir) and os.path.isdir(mine)  # its owner lives
        assert sweep_stale_dirs(PREFIX, str(tmp_path)) == []  # its own folder is not stale
    finally:
        alive.communicate("")
    assert alive.returncode == 0
    assert not os.path.exists(live_dir)  # removed at its normal exit
    assert sweep_stale_dirs(PREFIX, str(tmp_path)) == []


def test_a_folder_without_lock_file_is_swept_only_when_old(tmp_path):
    old, young = tmp_path / (PREFIX + "old"), tmp_path / (PREFIX + "young")
    old.mkdir()
    young.mkdir()
    (old / "0-model.so").write_bytes(b"x")
    then = time.time() - UNLOCKED_GRACE_S - 60
    os.utime(old, (then, then))
    assert sweep_stale_dirs(PREFIX, str(tmp_path)) == [str(old)]
    assert _dirs(tmp_path, PREFIX) == {young.name}


def test_artifact_copies_of_a_killed_process_are_removed_by_the_next(tmp_path):
    load = "from tessera.runtime import artifact, native; native.load(); print(artifact._copy_dir)"
    killed = _python(load + "; import os, signal; os.kill(os.getpid(), signal.SIGKILL)", tmp_path)
    dead_dir = killed.stdout.readline().strip()
    assert killed.wait() == -signal.SIGKILL
    assert any(n.endswith(".so") for n in os.listdir(dead_dir))  # the runtime's copy, leaked
    clean = _python(load, tmp_path)
    clean.communicate()
    assert clean.returncode == 0
    assert _dirs(tmp_path, "tessera-artifacts-") == set()
