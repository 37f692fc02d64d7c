"""`python -m torch_tfrecord` runs the `torch-tfrecord` command."""

from .cli.main import main

raise SystemExit(main())
