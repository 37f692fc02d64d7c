"""`python -m torch_tfrecord` runs the `torch-tfrecord` command."""

from .cli import main

raise SystemExit(main())
