"""Writes global-epoch1-rank0-of-2.json: a dataset's state taken mid-epoch, and the batches the
rest of that epoch gave, by the version of torch-tfrecord on sys.path (made once with 0.1.0 at
commit bb45295, before the package had layers; tests/test_public_api.py resumes it with today's).

Run: python tests/data/states/make_state_golden.py > tests/data/states/global-epoch1-rank0-of-2.json
"""

import json
import tempfile

import torch_tfrecord as tt

directory = tempfile.mkdtemp()
for shard in range(2):
    with tt.ExampleWriter(f"{directory}/train-{shard}.tfrecord") as writer:
        for i in range(50):
            writer.write({"id": shard * 50 + i})
dataset = tt.TFRecordDataset(
    f"{directory}/train-*.tfrecord",
    spec={"id": "int"},
    batch_size=8,
    shuffle="global",
    seed=7,
    rank=0,
    world_size=2,
    drop_last=False,
)
dataset.set_epoch(1)
batches = iter(dataset)
for _ in range(2):
    next(batches)
state = dataset.state_dict()
print(json.dumps({"state": state, "rest": [batch["id"].tolist() for batch in batches]}, indent=1))
