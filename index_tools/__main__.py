"""`python -m index_tools` runs the `tfrecord-index` command."""

from .cli import main

raise SystemExit(main())
