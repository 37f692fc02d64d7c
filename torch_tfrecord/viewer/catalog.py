"""What the viewer serves, apart from HTTP: the files given, their pages of records, the schema,
the statistics gathered in the background, and filtered searches through the records.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from ..codec.inspect import describe_record, show_key
from ..codec.label_map import LabelMapError, class_names_beside
from ..codec.query import parse_query
from ..errors import TFRecordError
from ..integrations.tfds.info import is_tfds_dir, read_info
from ..support.extras import install_hint
from .pages import LARGE_RECORD
from .record_view import image_type, view_described, view_record
from .shard import RecordRead, Shard
from .sources import ViewerError, expand_paths
from .statistics import FeatureStatistics

__all__ = ["Catalog", "ViewerError"]

logger = logging.getLogger(__name__)

PAGE_LIMIT = 200  # records one request may ask for
SCHEMA_RECORDS = 1000  # records the schema is inferred from, as `torch-tfrecord schema` does
_SEARCH_CHUNK = 256
_SEARCH_SECONDS = 1.5  # a search answers within about this long, with where to go on from
# Images up to this size come inside a page's JSON (fewer requests for the first page), up to a
# total per page; larger ones the page fetches one by one.
INLINE_IMAGE = 64 << 10
INLINE_PAGE = 1 << 20
BLOB_LIMIT = 32 << 20  # bytes of one value sent (an image of a record too large to read whole)


class Catalog:
    """The files of one ``torch-tfrecord view``, and what the page asks of them.

    Args:
        paths: files, globs, directories, TFDS directories or URLs.
        storage_options: for URLs.
        stats_records: records the statistics look at, at most (across all files).
        files: ``paths`` expanded already (:func:`~torch_tfrecord.viewer.sources.expand_paths`).
    """

    def __init__(
        self,
        paths: Sequence[str],
        storage_options: dict[str, Any] | None = None,
        stats_records: int = 100_000,
        files: tuple[list[str], dict[str, int]] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.storage_options = storage_options
        found, expected = files or expand_paths(self.paths, storage_options)
        self.shards = [Shard(path, storage_options, expected.get(path)) for path in found]
        self.warnings: list[str] = []  # side files that could not be read (the files page says)
        self.class_names = self._class_names([p for p in self.paths if "://" not in p])
        self.stats_records = stats_records
        self._statistics = FeatureStatistics()
        self._stats_done = False
        self._stats_thread: threading.Thread | None = None
        self._schema: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _class_names(self, local: Sequence[str]) -> dict[int, str]:
        """The names of the first label map beside the paths; a malformed one is named on the
        files page, and the viewer goes on without it."""
        for path in local:
            try:
                names = class_names_beside(path)
            except (LabelMapError, OSError) as error:
                self.warnings.append(f"{type(error).__name__}: {error}")
                logger.warning("%s", error)
                continue
            if names:
                return names
        return {}

    def start(self, build: bool = True) -> None:
        """Loads every file's index in the background, and builds those missing (local files);
        with ``build=False`` only remote files' indexes are loaded until :meth:`allow_work`."""
        for shard in self.shards:
            shard.start(build)

    def allow_work(self) -> None:
        """Lets the local files' index loads, builds and verifications that :meth:`start` held
        back begin."""
        for shard in self.shards:
            shard.allow_work()

    def close(self) -> None:
        for shard in self.shards:
            shard.close()

    def shard(self, file: int) -> Shard:
        if not 0 <= file < len(self.shards):
            raise ViewerError(f"no file {file}: there are {len(self.shards)}")
        return self.shards[file]

    def files(self) -> dict[str, Any]:
        """The files page: each file's size, records and index state, and the damage found."""
        files = [shard.describe() for shard in self.shards]
        return {"paths": self.paths, "files": files, "warnings": self.warnings}

    def records(self, file: int, start: int, count: int) -> dict[str, Any]:
        """A page of records of one file; ``pending`` while the index needed for it is built."""
        if not 0 < count <= PAGE_LIMIT:
            raise ViewerError(f"{count=} must be in 1..{PAGE_LIMIT}")
        shard = self.shard(file)
        reads = shard.read(max(start, 0), count)
        page: dict[str, Any] = {"file": file, "start": start, "total": shard.record_count()}
        page["shard"] = shard.describe()
        if reads is None:
            return {**page, "pending": True, "records": [], "next": None}
        # (the page's byte budget may end it early: the next page starts after its last record)
        page["next"] = reads[-1].number + 1 if reads else None
        budget = INLINE_PAGE
        page["records"] = []
        for read in reads:
            shown = self._view(read, min(INLINE_IMAGE, budget))
            budget -= len(shown.get("image_data") or "")
            page["records"].append(shown)
        return {**page, "pending": False}

    def _view(self, read: RecordRead, inline_limit: int) -> dict[str, Any]:
        where = {"number": read.number, "offset": read.offset, "framed_size": read.framed_size}
        if read.large and read.framed_size is not None:
            return {
                **where,
                "error": None,
                **view_described(read.described, read.framed_size - 16, self.class_names),
            }
        if read.payload is None:
            return {**where, "error": read.error}
        return {**where, "error": None, **view_record(read.payload, self.class_names, inline_limit)}

    def locate(self, file: int, offset: int) -> dict[str, Any]:
        """The record holding byte ``offset`` of a file (``pending`` until its index is ready)."""
        shard = self.shard(file)
        if offset < 0 or offset >= max(shard.size, 1):
            raise ViewerError(f"byte {offset} is outside {shard.path!r} ({shard.size:,} bytes)")
        record = shard.locate(offset)
        return {"file": file, "offset": offset, "record": record, "pending": record is None}

    def _payload(self, file: int, record: int) -> bytes:
        reads = self.shard(file).read(record, 1)
        if not reads or reads[0].number != record:
            raise ViewerError(f"no record {record} in {self.shard(file).path!r} (or its index is not ready)")
        if reads[0].large:
            raise ViewerError(
                f"record {record} of {self.shard(file).path!r} has {reads[0].framed_size:,} bytes: more "
                f"than the viewer reads whole ({LARGE_RECORD:,}); its values are fetched one by one"
            )
        if reads[0].payload is None:
            raise ViewerError(f"record {record} of {self.shard(file).path!r} is damaged: {reads[0].error}")
        return reads[0].payload

    def blob(self, file: int, record: int, key: str, item: int) -> tuple[bytes, str]:
        """The bytes of one value of a bytes feature, and its media type (images as themselves);
        of a record too large to read whole, the value alone (:data:`BLOB_LIMIT` bytes at most)."""
        shard = self.shard(file)
        table = shard.table
        value: bytes | None
        if table is not None and 0 <= record < len(table) and table[record, 1] > LARGE_RECORD:
            value = shard.value(record, key, item, BLOB_LIMIT)
        else:
            kind, values = (describe_record(self._payload(file, record)) or {}).get(key, ("empty", []))
            value = values[item] if kind == "bytes" and 0 <= item < len(values) else None
        if value is None:
            raise ViewerError(
                f"record {record} of file {file} has no bytes value {item} of {show_key(key)!r}"
            )
        return value, image_type(value) or "application/octet-stream"

    def mask(self, file: int, record: int) -> bytes:
        """The record's class mask as a PNG layer to draw over its image (colours by class)."""
        from ..vision.preview import mask_layer

        where = f"record {record} of {self.shard(file).path!r}"
        try:
            layer = mask_layer(self._payload(file, record), where)
        except ImportError as error:
            raise ImportError(f"drawing masks needs Pillow; {install_hint('view')}") from error
        if layer is None:
            raise ViewerError(f"{where} has no class mask")
        out = io.BytesIO()
        layer[0].save(out, format="PNG")
        return out.getvalue()

    def schema(self) -> dict[str, Any]:
        """What ``torch-tfrecord schema`` infers (from the first 1000 intact records), and the TFDS
        features of a TFDS directory."""
        with self._lock:
            if self._schema is None:
                self._schema = self._infer_schema()
            return self._schema

    def _infer_schema(self) -> dict[str, Any]:
        from ..codec.survey import survey_records  # numpy: not before the first page

        origins: list[tuple[str, int]] = []  # (file, record number in it), for the survey's messages

        def records() -> Iterator[bytes]:  # past damage, as verify reads: the page lists the damage
            for shard in self.shards:
                for number, payload in enumerate(shard.small_records()):
                    origins.append((shard.path, number))
                    yield payload
                    if len(origins) >= SCHEMA_RECORDS:
                        return

        survey = survey_records(records(), describe=lambda n: f"record {origins[n][1]} of {origins[n][0]!r}")

        def rows(proposals: dict[str, Any]) -> list[dict[str, Any]]:
            return [
                {
                    "key": key,
                    "spec": p.kind,
                    "detail": p.arguments(),
                    "note": p.note,
                    "steps": survey.steps.get(key),
                }
                for key, p in proposals.items()
            ]

        schema: dict[str, Any] = {
            "records": survey.records,
            "warnings": survey.warnings,
            "features": rows(survey.proposals),
            "feature_lists": None if survey.feature_lists is None else rows(survey.feature_lists),
            "code": survey.code(),
            "sequence_code": survey.sequence_code() if survey.feature_lists is not None else None,
            "tfds": [],
        }
        for path in self.paths:
            if is_tfds_dir(path, self.storage_options):
                info = read_info(path, self.storage_options)
                schema["tfds"].append(
                    {
                        "name": info.name,
                        "version": info.version,
                        "splits": {name: split.num_examples for name, split in info.splits.items()},
                        "features": info.features_json,
                    }
                )
        return schema

    def statistics(self) -> dict[str, Any]:
        """The statistics so far (started on the first call), ``partial`` until all are in."""
        with self._lock:
            if self._stats_thread is None:
                self._stats_thread = threading.Thread(target=self._gather, name="statistics", daemon=True)
                self._stats_thread.start()
            report = self._statistics.report()
        return {**report, "partial": not self._stats_done, "limit": self.stats_records}

    def _gather(self) -> None:
        seen = 0
        for shard in self.shards:
            try:
                for payload in shard.small_records():
                    features = describe_record(payload)
                    with self._lock:
                        self._statistics.add(features)
                    seen += 1
                    if seen >= self.stats_records:
                        break
            except (TFRecordError, OSError) as error:
                logger.warning("statistics stopped in %s: %s", shard.path, error)
            if seen >= self.stats_records:
                break
        self._stats_done = True

    def search(self, text: str, file: int, start: int, limit: int = 50) -> dict[str, Any]:
        """Records that pass the filter ``text``, from record ``start`` of file ``file`` on, for
        about a second and a half at most; ``next`` says where to go on from (None: all searched)."""
        query = parse_query(text)
        matches: list[dict[str, Any]] = []
        deadline = time.monotonic() + _SEARCH_SECONDS
        scanned = skipped = 0
        while file < len(self.shards) and len(matches) < limit and time.monotonic() < deadline:
            reads = self.shards[file].read(start, _SEARCH_CHUNK)
            if reads is None:
                found = {"matches": matches, "next": [file, start], "scanned": scanned, "skipped": skipped}
                return {**found, "pending": True}
            if not reads:  # (a chunk may end early, within the page's byte budget: not the file's end)
                file, start = file + 1, 0
                continue
            for read in reads:
                scanned += 1
                start = read.number + 1
                skipped += read.large  # too large to read whole: not searched
                features = None if read.payload is None else describe_record(read.payload)
                if query.matches(features):
                    matches.append({"file": file, "record": read.number, "summary": _summary(features or {})})
                    if len(matches) >= limit:
                        break
        done = file >= len(self.shards)
        return {
            "matches": matches,
            "next": None if done else [file, start],
            "scanned": scanned,
            "skipped": skipped,
            "pending": False,
        }


def _summary(features: dict[str, tuple[str, list[Any]]]) -> str:
    """A line that tells a matching record apart: its first few short values."""
    parts = []
    for key, (kind, values) in features.items():
        if values and not (kind == "bytes" and (len(values[0]) > 60 or image_type(values[0]))):
            shown = values[0].decode("utf-8", "replace") if kind == "bytes" else values[0]
            parts.append(f"{key}={shown}{'…' if len(values) > 1 else ''}")
        if len(parts) == 4:
            break
    return ", ".join(parts)
