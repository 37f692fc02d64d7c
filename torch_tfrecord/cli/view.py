"""``torch-tfrecord view``: browse TFRecord files in a web page served on 127.0.0.1."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any

from .options import add_command, add_storage_options, storage_options

__all__ = ["add_view_command"]


def add_view_command(commands: Any) -> list[argparse.ArgumentParser]:
    """Adds ``view`` to ``commands``; returns its parser in a list."""
    view = add_command(
        commands,
        "view",
        "browse records, schema and statistics in a local web page (127.0.0.1, a free port; Ctrl-C stops it)",
        "torch-tfrecord view 'data/train-*.tfrecord'\n"
        "torch-tfrecord view ~/tensorflow_datasets/mnist/3.0.1 --open",
    )
    view.add_argument("paths", nargs="+", help="files, globs, directories, TFDS directories or URLs")
    view.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    view.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default: 127.0.0.1); any other needs the token in the printed URL",
    )
    view.add_argument("--open", action="store_true", help="open the page in the default browser")
    view.add_argument(
        "--stats-records",
        type=int,
        default=100_000,
        help="records the statistics look at, at most (default: 100000)",
    )
    add_storage_options(view)
    view.set_defaults(run=cmd_view)
    return [view]


def cmd_view(args: argparse.Namespace) -> int:
    # Only the standard library's server and the paths' expansion before the address is printed;
    # the catalog (numpy, protobuf) is imported and made while the browser loads the page.
    from ..viewer.server import make_server
    from ..viewer.sources import expand_paths

    if TYPE_CHECKING:
        from ..viewer.catalog import Catalog

    logging.getLogger("torch_tfrecord.records.reader").setLevel(logging.ERROR)  # the page lists the damage
    options = storage_options(args)
    files = expand_paths(args.paths, options)  # no files: an error before any address

    def make_catalog() -> Catalog:
        from ..viewer.catalog import Catalog

        catalog = Catalog(args.paths, options, stats_records=args.stats_records, files=files)
        catalog.start(build=False)  # remote files' indexes are loaded at once ...
        return catalog

    server = make_server(make_catalog, args.host, args.port)
    server.allow_work_when_quiet()  # ... the local files' indexes wait for the first page
    print(f"torch-tfrecord view: {len(files[0])} file(s) at {server.url}  (Ctrl-C stops it)", flush=True)
    if args.open:
        import webbrowser

        webbrowser.open(server.url)
    # Ctrl-C stops it even when started where SIGINT was ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("torch-tfrecord view: stopped", file=sys.stderr, flush=True)
    finally:
        server.server_close()
        server.close_catalog()
    failure = server.catalog_failure()
    if failure is not None:
        raise failure
    return 0
