"""tests/launch.py: a test's process tree goes down whole, detached grandchildren that ignore SIGTERM
included (as torchrun's ranks are), on a timeout and after a normal exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import launch
import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the tree in /proc")

# A launcher that starts a rank in a session of its own which ignores SIGTERM, says so, and waits.
_LAUNCHER = """
import subprocess, sys, time
code = "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); print(flush=True); time.sleep(1e6)"
rank = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
rank.stdout.readline()  # the rank ignores SIGTERM from here on
print(rank.pid, flush=True)
if sys.argv[1] == "wait":
    time.sleep(10**6)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_stop_takes_down_a_detached_rank_that_ignores_sigterm() -> None:
    with launch.tree([sys.executable, "-c", _LAUNCHER, "wait"], stdout=subprocess.PIPE) as process:
        assert process.stdout is not None
        rank = int(process.stdout.readline())
        assert _alive(rank) and os.getsid(rank) != os.getsid(process.pid)  # its own session
        assert sorted(launch.marked(process.tree)) == sorted([process.pid, rank])  # type: ignore[attr-defined]
        launch.stop(process, grace_s=1.0)
    assert not _alive(rank) and not _alive(process.pid)


def test_an_orphan_left_after_a_normal_exit_is_swept() -> None:
    done = launch.run([sys.executable, "-c", _LAUNCHER, "exit"], timeout_s=300)
    assert done.returncode == 0
    assert not _alive(int(done.stdout))


def test_a_timeout_fails_the_test_and_stops_the_tree() -> None:
    with pytest.raises(pytest.fail.Exception, match="did not finish within 1 s"):
        launch.run([sys.executable, "-c", "import time; time.sleep(10**6)"], timeout_s=1)
    assert [pid for pid in launch.marked("") if pid] == []  # the empty mark: never set


# A launcher (no handler of its own) whose rank dumps its stacks on SIGUSR1 and hangs in a function.
_HUNG = """
import subprocess, sys, time
code = '''
import faulthandler, signal, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
def stuck_in_a_collective():
    print(flush=True)
    time.sleep(10**6)
stuck_in_a_collective()
'''
rank = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE)
rank.stdout.readline()
time.sleep(10**6)
"""


def test_a_hung_tree_dumps_its_stacks_before_it_is_stopped() -> None:
    with pytest.raises(pytest.fail.Exception, match="in stuck_in_a_collective") as failure:
        launch.run([sys.executable, "-c", _HUNG], timeout_s=3, dump_signal=signal.SIGUSR1)
    assert "did not finish within 3 s" in str(failure.value)
