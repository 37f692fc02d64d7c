"""Ray Data reads and writes TFRecord through torch-tfrecord, with no TensorFlow (``tt.ray``).

- :func:`read_tfrecords`: a Ray Dataset of Examples, planned from the indexes, decoded natively;
- :func:`write_tfrecords`: a Dataset's rows as Examples in numbered, indexed, atomic shards.

Needs the ``ray`` extra (Ray Data and pyarrow); ``import torch_tfrecord`` never imports it.
"""

from __future__ import annotations

from ...support.extras import install_hint

try:
    import pyarrow  # noqa: F401
    import ray.data  # noqa: F401
except ImportError as error:
    raise ImportError(f"tt.ray needs Ray Data; {install_hint('ray')}") from error

from .datasink import TFRecordDatasink, write_tfrecords
from .datasource import TFRecordDatasource, read_tfrecords

__all__ = ["TFRecordDatasink", "TFRecordDatasource", "read_tfrecords", "write_tfrecords"]
