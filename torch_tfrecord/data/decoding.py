"""The steps both datasets share: read records by id, decode them as a batch, run the transform.

Bad records are handled here so the datasets keep their counts: with ``on_error="skip"`` a
damaged record is replaced by a good one of the same batch, marked as padding, and logged.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..codec import native
from ..codec.decode import SpecArg, decode_batch
from ..codec.image_batch import seeded as image_seeds
from ..codec.payloads import Payload, payload_for
from ..codec.ragged import Ragged
from ..codec.rows import split_batch
from ..codec.schema import sample_dtypes
from ..codec.selection import RowList
from ..codec.spec import FeatureSpec, Image, normalize_spec
from ..codec.spec_file import decode_spec_json, read_spec_file
from ..errors import ExampleDecodeError, FeatureError, TFRecordError
from ..records.reader import OnError
from ..records.shard_access import BatchReadFailed
from ..records.shards.shard_records import ShardRecords
from ..support.seeds import mix_seed
from ..support.stages import DECODE, READ, TRANSFORM, begin, end, lap
from .select.selected_files import SelectedFiles

__all__ = [
    "PADDING_KEY",
    "RECORD_ID_KEY",
    "BatchDecoder",
    "SeededTransform",
    "check_transform_threads",
    "on_loading_thread",
    "transformed",
]

logger = logging.getLogger(__name__)

RECORD_ID_KEY = "_record_id"
"""Key of each sample's global record id (its place in the concatenated shards)."""
_SCRATCHES = 8  # read buffers kept at most (one per loading thread)
_TYPE_SAMPLE = 256  # records read at construction to type the keys of spec=None
PADDING_KEY = "_padding"
"""Key of the flag marking a sample that repeats a record (padding, or a stand-in for a bad one)."""
_ARRAY, _OWNED, _ROWS = 0, 1, 2  # how BatchDecoder.batches cuts a column: a NumPy copy, a clone, rows


class BatchDecoder:
    """Reads and decodes the records with the given ids into one batch of columns."""

    def __init__(
        self,
        files: ShardRecords,
        spec: dict[str, FeatureSpec] | None,
        *,
        verify_crc: bool,
        on_error: OnError,
        payload: Payload | None = None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"{on_error=} must be 'raise' or 'skip'")
        keys = set(spec or {}) | set(payload.keys() if payload is not None else ())
        reserved = {RECORD_ID_KEY, PADDING_KEY} | (payload.reserved if payload is not None else set())
        if keys & reserved:
            raise ValueError(f"feature key {sorted(keys & reserved)[0]!r} is reserved for metadata")
        self.files = files
        self.feature_spec = spec
        # Not an Example (spec="raw", SequenceExamples): the payload decodes the records.
        self.payload = payload
        # spec=None: the type of each key from a sample, for batches whose Features of a key
        # hold no list (so that a column keeps its type from batch to batch).
        self.dtypes = _sample_dtypes(files) if spec is None and payload is None else None
        self.verify_crc = verify_crc
        self.on_error = on_error
        # Images drawn at random (crops) need the batch's seeds: with an Image feature, or a
        # payload (SequenceExample contexts may hold one).
        self.images = payload is not None or any(
            isinstance(feature, Image) for feature in (spec or {}).values()
        )
        self.skipped = 0
        # Read buffers of earlier batches, reused: one per thread decoding at once (a new one
        # each batch would be mapped, zeroed and unmapped again, page by page).
        self._scratch: list[bytearray] = []

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_scratch"] = []
        return state

    def decode_seeded(
        self, ids: npt.NDArray[np.int64], padding: npt.NDArray[np.bool_], seed: int, epoch: int
    ) -> tuple[dict[str, Any], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """:meth:`decode`, the random regions of its images drawn from ``mix_seed(mix_seed(seed,
        epoch), record_id)``: the same whichever worker or batch decodes a record."""
        if not self.images:
            return self.decode(ids, padding)
        with image_seeds(mix_seed(seed, epoch), self.file_ids(ids)):
            return self.decode(ids, padding)

    def file_ids(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The files' record ids of ``ids``: the same, but for a selection (whose ids are places in it)."""
        return self.files.record_ids(ids) if isinstance(self.files, SelectedFiles) else ids

    def batch(
        self, ids: npt.NDArray[np.int64], padding: npt.NDArray[np.bool_], seed: int, epoch: int
    ) -> dict[str, Any]:
        """The records ``ids`` as a dataset's batch (before its transform): :meth:`decode_seeded`'s
        columns (lists as :class:`RowList`), ``"_record_id"`` and ``"_padding"``."""
        batch, ids, padding = self.decode_seeded(ids, padding, seed, epoch)
        for key, column in batch.items():
            if type(column) is list:  # batch[key][~batch["_padding"]] keeps rows, as for tensors
                batch[key] = RowList(column)
        # (copied: the ids and flags may be views of the epoch plan's block; a batch holds its own)
        batch[RECORD_ID_KEY] = torch.from_numpy(self.file_ids(ids).copy())
        batch[PADDING_KEY] = torch.from_numpy(padding.copy())
        return batch

    def batches(
        self, parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]], seed: int, epoch: int
    ) -> list[dict[str, Any]] | None:
        """Several batches as :meth:`batch` makes them, their records read and decoded in one native
        call and cut into the batches (each in its own memory); None where that path does not apply
        (images, payloads, the Python decoder, a column of another kind, or a record the native path
        refuses: then batch by batch, which names it or skips it). ``seed`` is :meth:`batch`'s."""
        if self.images or self.payload is not None or self.feature_spec is None:
            return None
        if native.decoder() != "native":
            return None
        run_ids = np.concatenate([ids for ids, _ in parts])
        columns = self._decode_natively(run_ids)
        if columns is None:
            return None
        # Each column's way of being cut, in the columns' order. Tensors are cut as NumPy arrays:
        # a copy there keeps the GIL, where each torch call lets it go (and, with loading threads,
        # hands it to another thread and waits to get it back).
        cuts: list[tuple[str, int, Any]] = []
        for key, column in columns.items():
            if type(column) is torch.Tensor and column.dtype is not torch.bfloat16:  # (NumPy has none)
                cuts.append((key, _ARRAY, column.numpy()))
            elif isinstance(column, torch.Tensor | Ragged):
                cuts.append((key, _OWNED, column))
            elif type(column) is list:
                cuts.append((key, _ROWS, column))
            else:
                return None
        # The run's record ids and flags, each batch's copied out: a batch holds memory of its own.
        record_ids, flags = self.file_ids(run_ids), np.concatenate([flags for _, flags in parts])
        made: list[dict[str, Any]] = []
        at = 0
        for ids, _ in parts:
            stop = at + len(ids)
            batch: dict[str, Any] = {}
            for key, kind, column in cuts:
                if kind == _ARRAY:
                    batch[key] = torch.from_numpy(column[at:stop].copy())
                elif kind == _OWNED:
                    batch[key] = _owned(column[at:stop])
                else:
                    batch[key] = RowList(column[at:stop])
            batch[RECORD_ID_KEY] = torch.from_numpy(record_ids[at:stop].copy())
            batch[PADDING_KEY] = torch.from_numpy(flags[at:stop].copy())
            made.append(batch)
            at = stop
        return made

    def samples(
        self, ids: npt.NDArray[np.int64], padding: npt.NDArray[np.bool_], seed: int, epoch: int
    ) -> list[dict[str, Any]]:
        """The records ``ids`` as a dataset's samples (before its transform), each with its
        ``"_record_id"`` and ``"_padding"``."""
        batch, ids, padding = self.decode_seeded(ids, padding, seed, epoch)
        samples = self.split(batch, len(ids))
        for sample, record_id, pad in zip(
            samples, self.file_ids(ids).tolist(), padding.tolist(), strict=True
        ):
            sample[RECORD_ID_KEY] = record_id
            sample[PADDING_KEY] = pad
        return samples

    def decode(
        self, ids: npt.NDArray[np.int64], padding: npt.NDArray[np.bool_]
    ) -> tuple[dict[str, Any], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Decoded columns of the records ``ids``; returns them with the ids and padding flags.

        With ``on_error="skip"`` the returned ids and flags say which records stand in for
        damaged ones.
        """
        if self.payload is None and self.feature_spec is not None and native.decoder() == "native":
            decoded = self._decode_natively(ids)
            if decoded is not None:
                return decoded, ids, padding
        token = begin()
        records = self.files.read(ids, verify_crc=self.verify_crc, on_error=self.on_error)
        token = lap(READ, token, sum(len(record) for record in records if record is not None))
        bad = [i for i, record in enumerate(records) if record is None]
        try:
            if not bad:
                columns = self._columns(records)  # type: ignore[arg-type]
                end(DECODE, token, len(ids))  # (its amount: records)
                return columns, ids, padding
        except (FeatureError, ExampleDecodeError):
            # Decode again naming each record, to raise (or skip) with a precise message.
            pass
        return self._decode_carefully(ids, padding, records, set(bad))

    def _decode_natively(self, ids: npt.NDArray[np.int64]) -> dict[str, Any] | None:
        """Reads and decodes in compiled code; None for anything amiss (the careful path below
        then raises or skips with the exact error)."""
        assert self.feature_spec is not None
        # Taken, not shared: each thread decoding at once has a buffer of its own.
        scratches = self._scratch
        try:
            scratch = scratches.pop()
        except IndexError:
            scratch = bytearray()
        try:
            token = begin()
            # A selection's records: read from its files by their record ids (mapped once a batch).
            files = self.files.base if isinstance(self.files, SelectedFiles) else self.files
            try:
                buffer, starts, sizes = files.read_framed(self.file_ids(ids), scratch)
            except BatchReadFailed:
                return None  # the per-record read names the record and why
            scratch = buffer
            token = lap(READ, token)  # (its bytes: counted by the read, in this thread)
            try:
                # The columns own their memory (values, and bytes copied out): nothing keeps
                # a view of the buffer once this returns.
                spec, crc = self.feature_spec, self.verify_crc
                columns = native.decode_framed(buffer, starts, sizes, spec, verify_crc=crc)
                end(DECODE, token, len(ids))
                return columns
            except (native.Rejected, FeatureError):
                return None
        finally:
            if len(scratches) < _SCRATCHES:
                scratches.append(scratch)

    def _decode_carefully(
        self,
        ids: npt.NDArray[np.int64],
        padding: npt.NDArray[np.bool_],
        records: list[bytes | None],
        bad: set[int],
    ) -> tuple[dict[str, Any], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        for i, record in enumerate(records):
            if i in bad:
                continue
            try:
                self._columns([record], [self.files.describe(int(ids[i]))])  # type: ignore[list-item]
            except (FeatureError, ExampleDecodeError) as error:
                if self.on_error == "raise":
                    raise
                logger.warning("skipping record: %s", error)
                bad.add(i)
        good = [i for i in range(len(records)) if i not in bad]
        if not good:
            raise TFRecordError(
                f"every record of a batch of {len(records)} is damaged (first: "
                f"{self.files.describe(int(ids[0]))}); nothing to stand in for them"
            )
        self.skipped += len(bad)
        # Each damaged record's place goes to the next good record (the last good one at the end).
        nearest = np.minimum(np.searchsorted(good, np.arange(len(ids))), len(good) - 1)
        stand_in = np.where(
            np.isin(np.arange(len(ids)), list(bad)), np.asarray(good)[nearest], np.arange(len(ids))
        )
        ids, padding = ids[stand_in], padding[stand_in] | np.isin(np.arange(len(ids)), list(bad))
        return self._columns([records[i] for i in stand_in]), ids, padding  # type: ignore[misc]

    def _columns(self, records: list[bytes], locations: list[str] | None = None) -> dict[str, Any]:
        if self.payload is not None:
            return self.payload.decode(records, locations)
        return decode_batch(records, self.feature_spec, locations=locations, dtypes=self.dtypes)

    def split(self, batch: dict[str, Any], size: int) -> list[dict[str, Any]]:
        """The samples of a batch that :meth:`decode` returned."""
        return split_batch(batch, size) if self.payload is None else self.payload.split(batch, size)


def _sample_dtypes(files: ShardRecords) -> dict[str, Any]:
    """Feature types from the first records of every shard (one run of reads per shard)."""
    per_shard = -(-_TYPE_SAMPLE // max(1, len(files.shard_sizes)))
    starts = np.cumsum((0, *files.shard_sizes[:-1]), dtype=np.int64)
    ids = np.concatenate(
        [np.arange(start, start + min(size, per_shard)) for start, size in zip(starts, files.shard_sizes)]
        or [np.zeros(0, np.int64)]
    )
    try:
        records = files.read(ids, verify_crc=False, on_error="skip")
    except TFRecordError as error:  # the data's own reads report damage where it matters
        logger.info("no feature types sampled for spec=None (%s)", error)
        return {}
    finally:
        files.close()  # the workers open their own
    return sample_dtypes(record for record in records if record is not None)


# Set on a dataset's loading threads (threads=N): a transform run there draws only from the
# generator it is given. torch's global RNG is one per process, shared with the training loop:
# seeding it here would change the loop's random numbers, and the threads' seeds would race.
_LOADING_THREAD: ContextVar[bool] = ContextVar("torch_tfrecord_loading_thread", default=False)
_NEEDS_GENERATOR = (
    "transform_threads=True runs the transform on the loading threads, where torch's global RNG "
    "(one per process, the training loop's too) cannot be seeded for it: give a transform that "
    "takes a generator= keyword and draws its random numbers from it, or leave transform_threads False"
)


@contextlib.contextmanager
def on_loading_thread() -> Iterator[None]:
    """Inside, transforms run as on a dataset's loading thread: seeded through ``generator=`` only."""
    token = _LOADING_THREAD.set(True)
    try:
        yield
    finally:
        _LOADING_THREAD.reset(token)


def check_transform_threads(transform: SeededTransform | None, transform_threads: bool) -> None:
    """Refuses ``transform_threads=True`` for a transform that cannot be seeded on a loading thread."""
    if transform_threads and transform is not None and not transform.takes_generator:
        raise ValueError(_NEEDS_GENERATOR)


class SeededTransform:
    """Runs a user transform with torch's global RNG seeded for the sample, then restored.

    So torchvision.transforms.v2 pipelines (which draw from the global RNG) give the same
    augmentation for the same (seed, epoch, record) however many workers run. A transform that
    takes a ``generator`` keyword also gets a ``torch.Generator`` seeded the same way. On a
    dataset's loading thread (``transform_threads=True``) only that generator is seeded: the
    global RNG is left alone.
    """

    def __init__(self, transform: Callable[..., Any]) -> None:
        if not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        self.transform = transform
        try:
            parameters = inspect.signature(transform).parameters
        except (TypeError, ValueError):  # some builtins have no signature
            parameters = {}  # type: ignore[assignment]
        self.takes_generator = "generator" in parameters

    def __call__(self, item: Any, seed: int) -> Any:
        token = begin()
        if _LOADING_THREAD.get():
            if not self.takes_generator:
                raise ValueError(_NEEDS_GENERATOR)
            item = self.transform(item, generator=torch.Generator().manual_seed(seed))
            end(TRANSFORM, token)
            return item
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if self.takes_generator:
                item = self.transform(item, generator=torch.Generator().manual_seed(seed))
            else:
                item = self.transform(item)
        end(TRANSFORM, token)
        return item


def transformed(transform: SeededTransform | None, item: dict[str, Any], seed: int, epoch: int) -> Any:
    """A dataset's batch or sample after ``transform``, its RNG seeded from (seed, epoch, the
    item's first record id)."""
    if transform is None:
        return item
    record_id = item[RECORD_ID_KEY]
    first = int(record_id[0]) if isinstance(record_id, torch.Tensor) else int(record_id)
    return transform(item, mix_seed(seed, epoch, first))


def decoder_for(
    files: ShardRecords,
    spec: SpecArg | str,
    context_spec: SpecArg,
    sequence_spec: SpecArg,
    verify_crc: bool,
    on_error: OnError,
) -> BatchDecoder:
    """The decoder of a dataset's arguments: Examples by spec, or raw / SequenceExample payloads.

    With no spec at all, the spec the dataset's manifest keeps, else the ``spec.json`` beside the
    shards (as ``tt.write_dataset`` and ``tt.from_parquet`` save it) gives it, when there is one."""
    if spec is None and context_spec is None and sequence_spec is None:
        if files.feature_spec is not None:
            saved = decode_spec_json(json.dumps(files.feature_spec), source="the manifest's spec")
        else:
            saved = read_spec_file(files.paths, files.storage_options)
        if saved is not None:
            spec, context_spec, sequence_spec = (
                saved.get(k) for k in ("spec", "context_spec", "sequence_spec")
            )
    payload = payload_for(spec, context_spec, sequence_spec)
    examples = None if payload is not None else normalize_spec(spec)  # type: ignore[arg-type]
    return BatchDecoder(files, examples, verify_crc=verify_crc, on_error=on_error, payload=payload)


def _owned(piece: torch.Tensor | Ragged) -> torch.Tensor | Ragged:
    """A slice of a run's column in memory of its own (a view would keep, pickle and send the run's)."""
    if isinstance(piece, Ragged):
        return Ragged(piece.values.clone(), piece.offsets.clone())
    return piece.clone()
