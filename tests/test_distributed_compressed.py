"""Real process groups over plain, GZIP and ZLIB shards: 2 ranks (gloo) x 2 DataLoader workers.

The shards are the TensorFlow-written golden files of tests/data/compressed (uneven sizes: 23,
41, 29, 17 records); one GZIP shard has a saved compressed index, the others are scanned in
memory. For every shuffle mode each rank all-gathers the record ids it saw in an epoch, and
in a run stopped mid-epoch and resumed with another number of workers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from gloo import gather_ranks
from test_distributed import TIMEOUT_S, WORLD_SIZE, _ids
from torch.utils.data import DataLoader

import torch_tfrecord as tt

pytest.importorskip("rapidgzip")

GOLDEN = Path(__file__).parent / "data" / "compressed"
EXPECTED: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())
SHUFFLES: list[Any] = [False, "shards", "global", "block:6"]
N = sum(len(shard["id"]) for shard in EXPECTED.values())  # 110


def _compressed_results(shards: str) -> dict[str, Any]:
    """One rank's epoch, and a run stopped and resumed with another worker count, per shuffle."""
    results: dict[str, Any] = {}
    spec = {"id": tt.FixedLen((), torch.int64)}
    for shuffle in SHUFFLES:

        def make(shuffle: Any = shuffle) -> tt.TFRecordDataset:
            return tt.TFRecordDataset(
                shards, spec=spec, batch_size=4, seed=5, shuffle=shuffle, drop_last=False
            )

        ds = make()
        ds.set_epoch(1)
        batches = list(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork"))
        # the "id" feature (written by TensorFlow) matches the record id of every sample
        assert all((b["id"] == b["_record_id"] + 1000).all() for b in batches)
        stopped = make()
        stopped.set_epoch(1)
        taken = []
        for step, batch in enumerate(
            DataLoader(stopped, batch_size=None, num_workers=2, multiprocessing_context="fork")
        ):
            taken.append(batch)
            if step == 4:
                break
        resumed = make()
        resumed.load_state_dict(stopped.state_dict(consumed=len(taken)))
        rest = list(DataLoader(resumed, batch_size=None, num_workers=3, multiprocessing_context="fork"))
        results[str(shuffle)] = {
            "len": len(ds),
            "epoch": _ids(batches),
            "taken": _ids(taken),
            "rest": _ids(rest),
        }
    return results


@pytest.fixture(scope="module")
def gathered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("ddp-compressed")
    shards = folder / "shards"
    shutil.copytree(GOLDEN, shards)
    (shards / "expected.json").unlink()
    gz = shards / "b-gzip.tfrecord.gz"
    tt.save_compressed_index(tt.build_compressed_index(gz), str(gz) + ".cidx")
    return gather_ranks(_compressed_results, WORLD_SIZE, (str(shards),), TIMEOUT_S, folder / "gathered.json")


@pytest.mark.parametrize("shuffle", [str(s) for s in SHUFFLES])
def test_exactly_once_equal_batches_and_resume_with_other_workers(
    gathered: list[dict[str, Any]], shuffle: str
) -> None:
    ranks = [rank[shuffle] for rank in gathered]
    assert [r["len"] for r in ranks] == [14, 14]  # ceil(110 / (2 ranks x 4)) batches on each rank
    assert [len(r["epoch"]) for r in ranks] == [56, 56]
    real = sorted(i for r in ranks for i, padding in r["epoch"] if not padding)
    assert real == list(range(N))  # every record of plain, GZIP and ZLIB shards exactly once
    assert sum(padding for r in ranks for _, padding in r["epoch"]) == 2
    for r in ranks:
        assert len(r["taken"]) == 20  # 5 batches of 4
        assert r["taken"] + r["rest"] == r["epoch"]  # no loss, no repeat, same order
    if shuffle != "False":
        assert ranks[0]["epoch"] != sorted(ranks[0]["epoch"])
