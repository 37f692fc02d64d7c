"""Spark 4 reads and writes TFRecord through torch-tfrecord: no TensorFlow, no JVM code (``tt.spark``).

- :func:`register`: makes ``spark.read.format("tfrecord")`` and ``df.write.format("tfrecord")`` work
  (a Python data source, :class:`TFRecordDataSource`);
- :func:`read_tfrecords`: a DataFrame of Examples, partitioned by index ranges;
- :func:`write_tfrecords`: a DataFrame's rows as Examples in indexed shards, with the manifest.

Needs the ``spark`` extra (pyspark 4 and pyarrow; Spark needs Java 17 or later);
``import torch_tfrecord`` never imports it.
"""

from __future__ import annotations

from ...support.extras import install_hint

try:
    import pyarrow  # noqa: F401
    import pyspark
    from pyspark.sql.datasource import DataSource  # noqa: F401
except ImportError as error:
    raise ImportError(f"tt.spark needs pyspark 4; {install_hint('spark')}") from error

if int(pyspark.__version__.split(".")[0]) < 4:
    raise ImportError(
        f"tt.spark needs pyspark 4 (Python data sources), found {pyspark.__version__}; "
        + install_hint("spark")
    )

from .api import read_tfrecords, register, write_tfrecords
from .source import TFRecordDataSource

__all__ = ["TFRecordDataSource", "read_tfrecords", "register", "write_tfrecords"]
