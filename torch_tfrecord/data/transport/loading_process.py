"""One loading process: a dataset's loading pipeline (its ``threads``) in one child process, so that
the training loop's process keeps its GIL and cores (``process=True``).

The child runs the epoch's tasks as the main process would (:func:`~.threaded.ahead`: N threads
or a prefetch thread) and sends each batch as a DataLoader worker does: its tensors and ``bytes``
columns copied into the child's ring of shared-memory slots (:mod:`.byte_ring`, through
:func:`~.handoff.pack_tensors` and multiprocessing's ``ForkingPickler``), a message of a few
hundred bytes through a pipe; the main process copies the batch out of the slot as it unpickles
the message. There is no index queue and no feeder thread: the child runs ahead by itself, at
most :data:`WINDOW` messages unread (each then has its ring slot free) beyond what its threads
hold, and the main process answers each message it has read with one byte.

- exact: the main process yields what it received, in the order sent, and counts progress on its
  side (``state_dict`` never includes a batch the child made ahead);
- errors: an exception in the child (a corrupt record, a raising transform on the threads) is
  raised in the main process, of the same type with the same message (the child's traceback as a
  note); the child's log records (``on_error="skip"``'s warnings) are logged in the main process;
  a child that dies (killed, out of memory) is a :class:`LoadingProcessError` within
  :data:`POLL_SECONDS`;
- lifetime: the child ends when the epoch ends, when the iterator is closed or collected, or at
  the interpreter's exit (each joined, killed after :data:`JOIN_SECONDS`), and by itself within
  a quarter of a second when the main process is gone (:func:`~.workers.watch_parent`);
- start: ``fork`` on Linux, as a DataLoader's workers (our loading threads pause at a task's end
  around a fork, see :mod:`.prefetch`); ``spawn`` elsewhere (the dataset pickles).
"""

from __future__ import annotations

import functools
import logging
import logging.handlers
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, NoReturn

import torch

from ..telemetry.shared import Telemetry
from .byte_ring import SLOTS, forget_rings
from .handoff import InlineBatch, pack_tensors
from .prefetch import Prefetcher, close_at_exit, closed
from .threaded import OrderedThreads, Task, ahead
from .workers import watch_parent

__all__ = [
    "JOIN_SECONDS",
    "POLL_SECONDS",
    "WINDOW",
    "LoadingProcess",
    "LoadingProcessError",
    "check_process",
    "load_ahead",
]

WINDOW = SLOTS
"""Messages the child sends ahead of what the main process has read (each has a free ring slot)."""
POLL_SECONDS = 0.25  # how often a waiting main process checks that the child lives
JOIN_SECONDS = 2.0  # how long a closing main process waits for the child before killing it
_BATCH, _SAMPLES, _LOG, _ERROR, _DONE = b"B", b"S", b"L", b"E", b"D"
_READ = b"r"  # the main process read a message
_COLUMNS, _LISTED = b"c", b"l"  # how a message of samples holds them
_NAME = "torch_tfrecord-loading"

Tasks = Callable[[], Iterator[Task[list[Any]]]]


class LoadingProcessError(RuntimeError):
    """The loading process (``process=True``) ended before its epoch did."""


def check_process(process: bool) -> bool:
    """``process`` checked: a bool."""
    if not isinstance(process, bool):
        raise ValueError(f"{process=} must be a bool")
    return process


def start_method() -> str:
    """``fork`` on Linux (as a DataLoader's workers there), else ``spawn``."""
    return "fork" if sys.platform == "linux" else "spawn"


def load_ahead(
    tasks: Tasks, threads: int, prefetch: int, telemetry: Telemetry, process: bool, batched: bool
) -> LoadingProcess | OrderedThreads[list[Any]] | Prefetcher[list[Any]] | Generator[list[Any], None, None]:
    """The items of ``tasks()`` as :func:`~.threaded.ahead` makes them; in a :class:`LoadingProcess`
    where ``process``. Close it when done."""
    if process:
        return LoadingProcess(tasks, threads, prefetch, batched, telemetry)
    return ahead(tasks(), threads, prefetch, telemetry)


class LoadingProcess:
    """The loaded items (one list per task, as :func:`~.threaded.ahead` gives them) of ``tasks()``
    run in a child process by ``threads`` threads (or a ``prefetch`` thread); close it when done.

    Args:
        tasks: makes the epoch's tasks (called in the child; pickled with ``spawn``).
        threads, prefetch: as for :func:`~.threaded.ahead`, in the child.
        batched: each task loads batches (each sent through the ring); else a list of samples.
        telemetry: the dataset's; the child counts in its own slot.
    """

    def __init__(
        self, tasks: Tasks, threads: int, prefetch: int, batched: bool, telemetry: Telemetry
    ) -> None:
        context = multiprocessing.get_context(start_method())
        self._conn, theirs = context.Pipe(duplex=True)
        self._closed = False
        process = context.Process(  # type: ignore[attr-defined]
            target=_child,
            args=(tasks, threads, prefetch, batched, telemetry, theirs, self._conn, os.getpid()),
            name=_NAME,
            daemon=True,
        )
        try:
            process.start()  # (spawn: a dataset that does not pickle raises here)
        except BaseException:
            self._conn.close()
            theirs.close()
            raise
        self._process = process
        theirs.close()  # (only the child holds its end: its death is the pipe's end here)
        self.pid: int = self._process.pid
        close_at_exit(self)

    def __iter__(self) -> LoadingProcess:
        return self

    def __next__(self) -> list[Any]:
        if self._closed:
            raise StopIteration
        while True:
            data = self._receive()
            kind, payload = data[:1], memoryview(data)[1:]
            if kind == _LOG:
                record = pickle.loads(payload)
                logging.getLogger(record.name).handle(record)
                continue
            if kind == _DONE:
                self.close()
                raise StopIteration
            if kind == _ERROR:
                self.close()
                raise _rebuilt(payload)
            try:
                items = [pickle.loads(payload)] if kind == _BATCH else _samples(payload)
            except (EOFError, OSError):  # shared memory it no longer shares: the child died?
                self._process.join(POLL_SECONDS)
                if self._process.exitcode is None:
                    raise
                self._died()
            try:
                self._conn.send_bytes(_READ)  # its slot is free: room for one more
            except OSError:  # the child has sent its last message and ended
                pass
            return items  # type: ignore[no-any-return]

    def _receive(self) -> bytes:
        conn = self._conn
        try:
            while not conn.poll(POLL_SECONDS):
                if not self._process.is_alive() and not conn.poll(0):  # (its end held open elsewhere)
                    self._died()
            return conn.recv_bytes()
        except (EOFError, OSError):
            pass
        self._died()

    def _died(self) -> NoReturn:
        self._process.join(JOIN_SECONDS)
        code = self._process.exitcode
        how = f"exit status {code}"
        if code is not None and code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:  # (a real-time signal)
                how = f"signal {-code}"
        self.close()
        raise LoadingProcessError(
            f"the loading process (pid {self.pid}) ended before its epoch did ({how}): killed, or out "
            "of memory? The batches not yet received are lost; state_dict() still names the place "
            "to resume from"
        )

    def close(self, deadline: float | None = None) -> None:
        """Ends the child (at once if it is waiting to send; after its batch in progress if not,
        killed after :data:`JOIN_SECONDS`) and joins it; idempotent. ``deadline``: as for
        :meth:`~.threaded.OrderedThreads.close`."""
        if self._closed:
            return
        self._closed = True
        closed(self)
        self._conn.close()  # the child's next send or wait fails: it ends
        process = self._process
        wait = JOIN_SECONDS if deadline is None else max(0.0, min(JOIN_SECONDS, deadline - time.monotonic()))
        process.join(wait)
        if process.exitcode is None:
            process.kill()
            process.join()
        forget_rings(self.pid)

    def __del__(self) -> None:
        if hasattr(self, "_process"):  # (not when the start failed)
            self.close()


# -- the child ---------------------------------------------------------------------------------


class _ParentGone(Exception):
    """The main process closed the pipe (it closed the iterator, or ended)."""


class _Sender:
    """The child's end of the pipe: messages from any thread, at most :data:`WINDOW` unread."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.unread = 0

    def send(self, kind: bytes, payload: bytes | memoryview) -> None:
        try:
            with self.lock:
                self.conn.send_bytes(kind + payload)
        except OSError as error:
            raise _ParentGone from error

    def send_item(self, kind: bytes, payload: Callable[[], bytes | memoryview]) -> None:
        """Sends ``payload()`` (made once there is room: a batch is placed in a free ring slot)."""
        try:
            while self.unread >= WINDOW:
                self.conn.recv_bytes()  # (only this thread reads)
                self.unread -= 1
        except (EOFError, OSError) as error:
            raise _ParentGone from error
        self.send(kind, payload())
        self.unread += 1


class _LogPipe:
    """A queue for ``logging.handlers.QueueHandler`` that sends each record to the main process."""

    def __init__(self, sender: _Sender) -> None:
        self.sender = sender

    def put_nowait(self, record: logging.LogRecord) -> None:
        try:
            self.sender.send(_LOG, pickle.dumps(record))
        except _ParentGone:
            pass


def _child(
    tasks: Tasks, threads: int, prefetch: int, batched: bool, telemetry: Telemetry, conn: Connection,
    parents: Connection, parent: int,
) -> None:  # fmt: skip
    parents.close()  # (a forked copy of the main process's end: its close there is our end of input)
    watch_parent(parent, "loading process")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle: it ends us
    torch.set_num_threads(1)  # (as a DataLoader worker: our decode has threads of its own)
    telemetry.as_loading_process()
    sender = _Sender(conn)
    package = logging.getLogger("torch_tfrecord")
    package.handlers = [logging.handlers.QueueHandler(_LogPipe(sender))]  # type: ignore[arg-type]
    package.propagate = False
    loads = ahead(tasks(), threads, prefetch, telemetry)
    meter = telemetry.meter(None)
    last = _DONE, b""
    try:
        loaded: Any
        for loaded in _timed(loads, meter, batched):  # a batch, or a list of samples
            if batched:
                sender.send_item(_BATCH, functools.partial(_ring_message, loaded))
            else:
                sender.send_item(_SAMPLES, functools.partial(_samples_message, loaded))
            del loaded
    except _ParentGone:
        return
    except BaseException as error:  # raised in the main process
        last = _ERROR, _carried(error)
    finally:
        loads.close()
        meter.close()  # (the counters written before the main process reads them)
    try:
        sender.send(*last)
        # Alive until the main process has read every message: the file descriptors of shared
        # memory in them are fetched from this process (multiprocessing's resource sharer).
        while True:
            conn.recv_bytes()
    except (_ParentGone, EOFError, OSError):
        pass


def _ring_message(batch: Any) -> memoryview:
    """The message of ``batch``: its fields placed in a free slot of this process's ring."""
    return ForkingPickler.dumps(pack_tensors(batch))


def _samples_message(samples: list[Any]) -> bytes | memoryview:
    """The message of a read's samples: as columns through the ring (a tensor per key, the
    samples' stacked, where they are dicts of the same keys); else each dict's tensors pickled as
    NumPy arrays (a tenth of the cost of torch's own pickling of a storage)."""
    columns = _columns(samples)
    if columns is not None:
        return _COLUMNS + ForkingPickler.dumps((len(samples), pack_tensors(columns)))
    return _LISTED + pickle.dumps([InlineBatch(s) if type(s) is dict else s for s in samples], protocol=5)


def _columns(samples: list[Any]) -> dict[str, Any] | None:
    """The samples' values key by key (a stacked tensor where they are tensors of one shape and
    dtype, else a list), or None where they are not all dicts of the same keys."""
    if not samples or type(samples[0]) is not dict:
        return None
    keys = samples[0].keys()
    if any(type(sample) is not dict or sample.keys() != keys for sample in samples):
        return None
    columns: dict[str, Any] = {}
    for key in keys:
        values = [sample[key] for sample in samples]
        first = values[0]
        if type(first) is torch.Tensor and all(
            type(v) is torch.Tensor and v.shape == first.shape and v.dtype == first.dtype for v in values
        ):
            columns[key] = torch.stack(values)
        else:
            columns[key] = values
    return columns


def _samples(payload: memoryview) -> list[Any]:
    """The samples of a message of :func:`_samples_message`."""
    if payload[:1] == _LISTED:
        return pickle.loads(payload[1:])  # type: ignore[no-any-return]
    count, columns = pickle.loads(payload[1:])
    return [{key: column[at] for key, column in columns.items()} for at in range(count)]


def _timed(loads: Iterator[list[Any]], meter: Any, batched: bool) -> Iterator[Any]:
    """``loads`` (``batched``: their batches, one by one, a task's run of them too), each timed as
    an item the process made (not the wait to send it)."""
    items = (batch for loaded in loads for batch in loaded) if batched else loads
    while True:
        meter.asked()
        item = next(items, _NO_ITEM)
        if item is _NO_ITEM:
            return
        meter.ready()
        yield item


_NO_ITEM = object()


def _carried(error: BaseException) -> bytes:
    """``error`` as the main process rebuilds it: pickled as it is where that round-trips; else its
    type, arguments and attributes (an ``__init__`` of keywords); else a RuntimeError of its text;
    with the child's traceback as a note."""
    where = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    note = f"raised in the loading process (pid {os.getpid()}):\n{where}"
    error.__traceback__ = None  # (not pickled: frames)
    for carried in (error, (type(error), error.args, dict(vars(error)))):
        try:
            data = pickle.dumps((carried, note))
            pickle.loads(data)  # (an exception whose __init__ takes keywords fails here)
            return data
        except Exception:
            continue
    return pickle.dumps((RuntimeError(f"{type(error).__name__}: {error}"), note))


def _rebuilt(payload: memoryview) -> BaseException:
    carried, note = pickle.loads(payload)
    error: BaseException
    if isinstance(carried, BaseException):
        error = carried
    else:
        kind, args, attributes = carried
        error = kind.__new__(kind)  # (not its __init__: its arguments are keywords)
        error.args = args
        error.__dict__.update(attributes)
    if hasattr(error, "add_note"):
        error.add_note(note)
    return error
