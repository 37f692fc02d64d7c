"""Draws partition.svg: how one epoch's records are split over ranks and DataLoader workers.

The picture is computed, not drawn by hand: every box comes from the dataset's own partition
logic (torch_tfrecord.data.order.plan: EpochPlan for the epoch's order and the ranks, WorkerSlice for the
workers), for 3 shards of 7, 5 and 6 records, 2 ranks, 2 workers each, batches of 2,
shuffle="global", seed 0, epoch 0, drop_last=False. tests/test_docs.py checks that the committed
SVG is what this script writes.

    python docs/images/partition.py   # rewrites docs/images/partition.svg
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from torch_tfrecord.data.order.plan import EpochPlan, Progress, WorkerSlice

SHARD_SIZES = (7, 5, 6)
WORLD_SIZE = 2
NUM_WORKERS = 2
BATCH_SIZE = 2
SEED = 0
EPOCH = 0

COLOURS = ("#4e79a7", "#f28e2b", "#59a14f")  # one per shard
BOX = 34
GAP = 4
LEFT = 190
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


def plans() -> list[EpochPlan]:
    """The plan of each rank, as TFRecordDataset makes it."""
    return [
        EpochPlan(
            SHARD_SIZES,
            world_size=WORLD_SIZE,
            rank=rank,
            batch_size=BATCH_SIZE,
            drop_last=False,
            shuffle="global",
            seed=SEED,
        )
        for rank in range(WORLD_SIZE)
    ]


def worker_batches(plan: EpochPlan, worker_id: int) -> list[tuple[int, list[int], list[bool]]]:
    """(batch number, record ids, padding flags) of each batch one worker of ``plan``'s rank makes.

    The same calls as TFRecordDataset.__iter__ in batch mode from the start of an epoch.
    """
    workers = WorkerSlice(NUM_WORKERS, worker_id, chunk=1)
    progress = Progress()
    batches = []
    for block in workers.items(progress.remaining(plan.units_per_rank)):
        for unit in progress.units(block).tolist():
            ids, padding = plan.records(plan.unit_positions(np.asarray([unit])), EPOCH)
            batches.append((unit, ids.tolist(), padding.tolist()))
    return batches


def shard_of(record_id: int) -> int:
    return int(np.searchsorted(np.cumsum(SHARD_SIZES), record_id, side="right"))


class Canvas:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def text(
        self, x: float, y: float, words: str, size: int = 13, anchor: str = "start", **style: str
    ) -> None:
        extra = "".join(f" {key.replace('_', '-')}='{value}'" for key, value in style.items())
        self.parts.append(
            f"<text x='{x}' y='{y}' font-size='{size}' text-anchor='{anchor}' {FONT}{extra}>"
            f"{html.escape(words)}</text>"
        )

    def record(self, x: float, y: float, record_id: int, padding: bool = False) -> None:
        colour = COLOURS[shard_of(record_id)]
        if padding:
            self.parts.append(
                f"<rect x='{x}' y='{y}' width='{BOX}' height='{BOX}' rx='4' "
                f"fill='url(#pad{shard_of(record_id)})' stroke='{colour}' "
                "stroke-width='2' stroke-dasharray='4 2'/>"
            )
        else:
            self.parts.append(f"<rect x='{x}' y='{y}' width='{BOX}' height='{BOX}' rx='4' fill='{colour}'/>")
        fill = "#222" if padding else "#fff"
        self.text(
            x + BOX / 2, y + BOX / 2 + 5, str(record_id), anchor="middle", fill=fill, font_weight="bold"
        )

    def bracket(self, x0: float, x1: float, y: float, label: str) -> None:
        self.parts.append(f"<path d='M{x0} {y} v6 H{x1} v-6' fill='none' stroke='#555' stroke-width='1.5'/>")
        self.text((x0 + x1) / 2, y + 22, label, size=12, anchor="middle", fill="#333")

    def svg(self, width: int, height: int) -> str:
        patterns = "".join(
            f"<pattern id='pad{i}' width='6' height='6' patternUnits='userSpaceOnUse' "
            f"patternTransform='rotate(45)'><rect width='6' height='6' fill='#fff'/>"
            f"<line x1='0' y1='0' x2='0' y2='6' stroke='{colour}' stroke-width='2' opacity='0.5'/></pattern>"
            for i, colour in enumerate(COLOURS)
        )
        body = "\n".join(self.parts)
        return (
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}' role='img' aria-labelledby='title'>\n"
            f"<title id='title'>How TFRecordDataset splits one epoch over {WORLD_SIZE} ranks and "
            f"{NUM_WORKERS} DataLoader workers each</title>\n"
            f"<defs>{patterns}</defs>\n<rect width='100%' height='100%' fill='#fff'/>\n{body}\n</svg>\n"
        )


def draw() -> str:
    canvas = Canvas()
    step = BOX + GAP
    rank_plans = plans()
    plan = rank_plans[0]
    y = 30

    # 1. The shards, as files hold them: record ids count through the shards.
    canvas.text(10, y + 22, "shards (files)", size=14, font_weight="bold")
    x = LEFT
    first = 0
    for shard, size in enumerate(SHARD_SIZES):
        for record_id in range(first, first + size):
            canvas.record(x, y, record_id)
            x += step
        canvas.bracket(x - size * step, x - GAP, y + BOX + 6, f"shard {shard}: {size} records")
        first += size
        x += 14
    y += BOX + 70

    # 2. The epoch's order of all records (a permutation), cut into one block per rank.
    canvas.text(10, y + 14, f"epoch {EPOCH} order", size=14, font_weight="bold")
    canvas.text(10, y + 32, f"shuffle='global', seed={SEED}", size=11, fill="#555")
    x = LEFT
    for rank_plan in rank_plans:
        ids, padding = rank_plan.records(np.arange(rank_plan.samples_per_rank), EPOCH)
        start = x
        for record_id, pad in zip(ids.tolist(), padding.tolist(), strict=True):
            canvas.record(x, y, record_id, pad)
            x += step
        canvas.bracket(
            start, x - GAP, y + BOX + 6, f"rank {rank_plan.rank}: {rank_plan.samples_per_rank} samples"
        )
        x += 14
    y += BOX + 76

    # 3. Each rank's batches, dealt round-robin to its DataLoader workers; every batch is drawn
    # under the places of the epoch's order it came from.
    for rank_plan in rank_plans:
        block_start = LEFT + rank_plan.rank * (rank_plan.samples_per_rank * step + 14)
        canvas.text(10, y - 14, f"rank {rank_plan.rank}", size=14, font_weight="bold")
        for worker_id in range(NUM_WORKERS):
            canvas.text(24, y + 22, f"worker {worker_id}", size=13)
            for unit, ids_, pads in worker_batches(rank_plan, worker_id):
                x = block_start + unit * BATCH_SIZE * step
                canvas.text(x + 2, y - 4, f"batch {unit}", size=11, fill="#555")
                for offset, (record_id, pad) in enumerate(zip(ids_, pads, strict=True)):
                    canvas.record(x + offset * step, y, record_id, pad)
            y += BOX + 26
        y += 26

    # Legend.
    x = LEFT
    for shard, colour in enumerate(COLOURS):
        canvas.parts.append(f"<rect x='{x}' y='{y - 12}' width='14' height='14' rx='3' fill='{colour}'/>")
        canvas.text(x + 20, y, f"shard {shard}", size=12)
        x += 90
    canvas.record(x, y - 22, 0, padding=True)
    canvas.text(
        x + BOX + 8,
        y,
        f"padding: a repeated record, '_padding' True (drop_last=False; {plan.padding} this epoch)",
        size=12,
    )
    width = LEFT + WORLD_SIZE * plan.samples_per_rank * step + 14 * WORLD_SIZE + 20
    return canvas.svg(width, y + 24)


def main() -> None:
    path = Path(__file__).with_suffix(".svg")
    path.write_text(draw())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
