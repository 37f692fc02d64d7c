"""Faults survived: a DDP job killed mid-epoch and resumed, a DataLoader worker killed, a writer killed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gloo import free_port

import torch_tfrecord as tt

FAULTS = Path(__file__).resolve().parent / "faults"
ROOT = FAULTS.parent.parent


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _start_ranks(shards: Path, out: Path, run: str) -> list[subprocess.Popen[bytes]]:
    port = free_port()
    processes = []
    for rank in range(2):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RUN": run,
            "STEP_SECONDS": "0.15" if run == "first" else "0",  # slow enough to be killed mid-epoch
        }
        processes.append(
            subprocess.Popen(
                [sys.executable, str(FAULTS / "ddp_rank.py"), str(shards), str(out)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=(out / f"rank-{rank}-{run}.err").open("wb"),
                start_new_session=True,  # its own process group: the kill reaches its workers too
            )
        )
    return processes


def test_ddp_job_killed_mid_epoch_resumes_exactly(
    id_shards: Callable[..., list[Path]], tmp_path: Path
) -> None:
    """2 ranks x 2 workers, killed with SIGKILL mid-epoch, restarted from their checkpoints.

    Both ranks resume from the last step both saved (the kill may fall between their saves).
    Each rank's records over both runs are its share of the epoch exactly once, except the
    batches it took after that step, which the resumed run hands out again (the same batches,
    in the same order): those are counted and reported.
    """
    shards = id_shards([100, 60, 0, 156])  # 316 records: 19 batches of 8 per rank, 12 dropped
    out = tmp_path / "run"
    out.mkdir()
    first = _start_ranks(shards[0].parent, out, "first")

    def batches(rank: int) -> int:
        return sum("ids" in e for e in _log(out / f"rank-{rank}.log"))

    try:
        _wait_for(lambda: all(batches(r) >= 8 for r in range(2)), 180, "8 batches per rank")
    finally:
        for process in first:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    killed_at = {r: batches(r) for r in range(2)}

    def saved_steps(rank: int) -> list[int]:
        return sorted(int(p.stem.rpartition("-")[2]) for p in out.glob(f"rank-{rank}-step-*.ckpt"))

    # As when the kill falls between the two ranks' saves (it did in a full run under load): rank 0 lacks
    # its last checkpoint, so the ranks must agree on an earlier step.
    (out / f"rank-0-step-{saved_steps(0)[-1]}.ckpt").unlink()
    checkpoints = {r: saved_steps(r)[-1] for r in range(2)}  # each rank's last saved step
    assert checkpoints[0] < checkpoints[1]
    kept = min(checkpoints.values())
    second = _start_ranks(shards[0].parent, out, "second")
    for rank, process in enumerate(second):
        assert process.wait(timeout=180) == 0, (out / f"rank-{rank}-second.err").read_text()[-3000:]

    plan = tt.EpochPlan((100, 60, 0, 156), world_size=2, batch_size=8, seed=3)
    seen_by_rank, repeated = [], {}
    for rank in range(2):
        entries = _log(out / f"rank-{rank}.log")
        runs = {
            run: [e["ids"] for e in entries if e.get("run") == run and "ids" in e]
            for run in ("first", "second")
        }
        assert entries[-1] == {"finished": True, "run": "second"}
        before_kill, after = runs["first"], runs["second"]
        assert [e["resumed_from"] for e in entries if "resumed_from" in e] == [0, kept]
        assert len(before_kill) == killed_at[rank] and 0 < kept <= len(before_kill)
        # The batches after the last checkpoint come again, identical, at the start of the resumed run.
        assert after[: len(before_kill) - kept] == before_kill[kept:]
        repeated[rank] = len(before_kill) - kept
        epoch = before_kill[:kept] + after
        expected, _ = plan.__class__(**{**plan.__dict__, "rank": rank}).records(
            range(plan.samples_per_rank), 0
        )
        assert [i for batch in epoch for i in batch] == expected.tolist()
        seen_by_rank.append({i for batch in epoch for i in batch})
    assert not seen_by_rank[0] & seen_by_rank[1]
    assert len(seen_by_rank[0] | seen_by_rank[1]) == 316 - plan.dropped == 304
    print(
        f"killed after {killed_at} batches; last checkpoints at {checkpoints}, resumed from {kept}; "
        f"batches repeated: {repeated}"
    )


@contextlib.contextmanager
def _own_session(command: list[str], folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Starts ``command`` in a new session, its output in ``folder``/stdout and stderr.

    The output goes to files, not pipes: a child it leaves (a DataLoader worker) would hold a
    pipe open, and reading to its end would hang. On leaving, its whole process group is
    killed, so a test leaves no orphan, whatever the script did.
    """
    with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):  # nothing left in the group
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_worker_killed_gives_a_clear_error_not_a_hang(
    id_shards: Callable[..., list[Path]], tmp_path: Path
) -> None:
    (shard,) = id_shards([4000])
    with _own_session([sys.executable, str(FAULTS / "kill_worker.py"), str(shard)], tmp_path) as process:
        assert process.wait(timeout=120) == 0, (tmp_path / "stderr").read_text()[-3000:]
    outcome = json.loads((tmp_path / "stdout").read_text().splitlines()[-1])
    # Which of PyTorch's checks notices first varies: the SIGCHLD handler, or the data queue. When
    # the killed worker had a batch in flight, torch's fd passing fails to fetch its memory from
    # the dead process first: ConnectionResetError or EOFError (about 1 run in 4 here).
    victim = outcome["victim"]
    if outcome["error"] == "RuntimeError":
        assert outcome["message"].startswith(
            (
                f"DataLoader worker (pid {victim}) is killed by signal",
                f"DataLoader worker (pid(s) {victim}) exited",
            )
        ), outcome
    else:
        assert outcome["error"] in ("ConnectionResetError", "EOFError"), outcome
    assert outcome["seconds"] < 30, outcome
    print(outcome)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs: not ended, and not a zombie (ended, not yet reaped by init)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text() if sys.platform == "linux" else ""
    except (ProcessLookupError, FileNotFoundError):
        return False
    return not stat or stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(sys.platform == "win32", reason="a no-op on Windows, where PyTorch's own watchdog works")
@pytest.mark.parametrize(
    ("kind", "held_up", "context"),
    [
        ("iterable", "starting", "fork"),
        ("iterable", "busy", "fork"),
        ("indexed", "starting", "fork"),
        ("indexed", "busy", "fork"),
        # A fork server, not the main process, is the workers' parent process (Python 3.14's default).
        ("iterable", "busy", "forkserver"),
    ],
)
def test_workers_end_when_the_main_process_dies(
    id_shards: Callable[..., list[Path]], tmp_path: Path, kind: str, held_up: str, context: str
) -> None:
    """A training script that dies leaves no DataLoader worker behind: not one that was still
    starting (PyTorch's watchdog would take init for its parent and wait for work for ever), not
    one busy with a long batch (PyTorch checks its parent only between batches). And a worker
    whose main process lives is never ended (the script takes a batch from worker 0)."""
    (shard,) = id_shards([400])
    pids = tmp_path / "pids"
    pids.mkdir()
    script = str(FAULTS / "orphan_workers.py")
    command = [sys.executable, script, str(shard), str(pids), kind, held_up, context]
    with _own_session(command, tmp_path) as process:
        assert process.wait(timeout=120) == 0, (tmp_path / "stderr").read_text()[-3000:]
        died = time.monotonic()
        workers = [int((pids / f"worker-{w}.pid").read_text()) for w in range(2)]
        # A starting worker first finishes its 2 s worker_init_fn; a busy one would run for minutes.
        _wait_for(lambda: not any(_alive(pid) for pid in workers), 20, f"workers {workers} to end")
        ended_after = time.monotonic() - died
    assert (tmp_path / "stdout").read_text() == "exiting\n"
    stderr = (tmp_path / "stderr").read_text()
    assert f"DataLoader worker {workers[1]} ends: its main process {process.pid} is gone" in stderr, stderr
    print(f"workers ended {ended_after:.2f} s after their main process")


@pytest.mark.parametrize("mode", ["single", "sharded"])
def test_writer_killed_mid_shard(tmp_path: Path, mode: str) -> None:
    """No file under a final name is partial; every shard finished before the kill is whole."""
    process = subprocess.Popen(
        [sys.executable, str(FAULTS / "write_shards.py"), str(tmp_path), mode],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    finished = [int(process.stdout.readline()) for _ in range(3)]
    # Killed mid-shard for sure: stopped, and killed only once a later shard's temporary file is
    # there (so the finished ones are closed; a sleep "into the next shard" could land between one
    # shard's rename and the next one's open, or before the rotation on a busy machine).
    later = re.compile(r"\.(?:part|train)-(\d+)\.tfrecord\.tmp-")
    deadline = time.monotonic() + 60
    while True:
        process.send_signal(signal.SIGSTOP)
        names = [later.match(p.name) for p in tmp_path.iterdir()]
        if any(m is not None and int(m.group(1)) > finished[-1] for m in names):
            break
        process.send_signal(signal.SIGCONT)
        assert time.monotonic() < deadline, "the writer was never caught with a shard under way"
        time.sleep(0.01)
    process.kill()
    process.wait()
    final = sorted(p for p in tmp_path.iterdir() if not p.name.startswith("."))
    hidden = sorted(p for p in tmp_path.iterdir() if p.name.startswith("."))
    if mode == "single":
        data = [p for p in final if p.suffix == ".tfrecord"]
        assert [p.name for p in data][: len(finished)] == [f"part-{s:05d}.tfrecord" for s in finished]
        for path in data:  # every file under a final name is whole and its index fresh
            table = tt.load_index(tt.default_index_path(path), data_path=path)
            ids = [tt.decode_example(r)["id"].item() for r in tt.read_records(path)]
            assert len(table) == 2000 and ids == list(range(ids[0], ids[0] + 2000))
    else:
        assert final == []  # shards are renamed only at close: a killed writer published nothing
        whole = [p for p in hidden if len(list(tt.read_records(p, on_error="skip"))) == 2000]
        assert len(whole) >= len(finished)  # finished shards are complete under their temporary names
    assert any(p.name.startswith(".") and ".tmp-" in p.name for p in hidden)  # the killed shard's remains
