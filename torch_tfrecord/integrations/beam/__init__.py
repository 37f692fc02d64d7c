"""Apache Beam writes and reads TFRecord through torch-tfrecord, with no TensorFlow (``tt.beam``).

- :class:`WriteExamples`: dicts encoded as Examples into indexed shards, and the dataset's manifest;
- :class:`ReadExamples`: shards read by index ranges into dicts of NumPy values (or Arrow tables).

Needs the ``beam`` extra (apache-beam); ``import torch_tfrecord`` never imports it.
"""

from __future__ import annotations

from ...support.extras import install_hint

try:
    import apache_beam  # noqa: F401
except ImportError as error:
    raise ImportError(f"tt.beam needs Apache Beam; {install_hint('beam')}") from error

from .transforms import ReadExamples, WriteExamples

__all__ = ["ReadExamples", "WriteExamples"]
