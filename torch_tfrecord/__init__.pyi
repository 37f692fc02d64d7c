"""The public names of torch_tfrecord, each with the submodule that defines it: the one table.

Type checkers and IDEs read this file; at run time ``torch_tfrecord/__init__.py`` reads it too,
to import each name from its submodule on first use and to make ``__all__`` (sorted). A new
public name is one line here.
"""

__version__: str

# Modules the documentation reaches as attributes (``tt.native.decoder()``, ``tt.ray.read_tfrecords``).
from .codec import native as native
from .codec.decode import decode_batch as decode_batch
from .codec.decode import decode_example as decode_example
from .codec.decode import decode_sequence_batch as decode_sequence_batch
from .codec.decode import decode_sequence_example as decode_sequence_example
from .codec.encode import BytesList as BytesList
from .codec.encode import FloatList as FloatList
from .codec.encode import Int64List as Int64List
from .codec.encode import encode_example as encode_example
from .codec.encode import encode_sequence_example as encode_sequence_example
from .codec.image_spec import Image as Image
from .codec.ragged import Ragged as Ragged
from .codec.rows import split_batch as split_batch
from .codec.schema import infer_spec as infer_spec
from .codec.selection import RowList as RowList
from .codec.spec import FixedLen as FixedLen
from .codec.spec import FixedLenSequence as FixedLenSequence
from .codec.spec import RawTensor as RawTensor
from .codec.spec import VarLen as VarLen
from .codec.writer import ExampleWriter as ExampleWriter
from .codec.writer import ShardedExampleWriter as ShardedExampleWriter
from .convert.dataset import write_dataset as write_dataset
from .convert.parquet import from_parquet as from_parquet
from .convert.parquet import to_parquet as to_parquet
from .data import order as order
from .data.bucket import BucketedDataset as BucketedDataset
from .data.bucket import bucket as bucket
from .data.dataset import TFRecordDataset as TFRecordDataset
from .data.decoding import PADDING_KEY as PADDING_KEY
from .data.decoding import RECORD_ID_KEY as RECORD_ID_KEY
from .data.indexed import IndexedTFRecordDataset as IndexedTFRecordDataset
from .data.loader import loader as loader
from .data.mix import MixedDataset as MixedDataset
from .data.mix import mix as mix
from .data.order.plan import EpochPlan as EpochPlan
from .data.pack import PackedDataset as PackedDataset
from .data.pack import pack as pack
from .data.select.select_records import select as select
from .data.select.selection import Selection as Selection
from .data.telemetry.stats import LoadStats as LoadStats
from .data.transport.collate import collate as collate
from .errors import CompressedIndexError as CompressedIndexError
from .errors import CorruptRecordError as CorruptRecordError
from .errors import ExampleDecodeError as ExampleDecodeError
from .errors import FeatureError as FeatureError
from .errors import FeatureShapeError as FeatureShapeError
from .errors import FeatureTypeError as FeatureTypeError
from .errors import IndexFormatError as IndexFormatError
from .errors import MissingFeatureError as MissingFeatureError
from .errors import RemoteIOError as RemoteIOError
from .errors import SelectionError as SelectionError
from .errors import SourceNotFoundError as SourceNotFoundError
from .errors import SpecError as SpecError
from .errors import StaleIndexError as StaleIndexError
from .errors import TFRecordError as TFRecordError
from .errors import TruncatedRecordError as TruncatedRecordError
from .integrations import beam as beam
from .integrations import ray as ray
from .integrations import spark as spark
from .integrations import tfds as tfds
from .integrations.hf import to_hf as to_hf
from .integrations.tfds.load import from_tfds as from_tfds
from .records import remote as remote
from .records.compressed.index import CompressedIndex as CompressedIndex
from .records.compressed.index import load_compressed_index as load_compressed_index
from .records.compressed.index import save_compressed_index as save_compressed_index
from .records.compressed.inflate import build_compressed_index as build_compressed_index
from .records.framing import encode_record as encode_record
from .records.framing import masked_crc32c as masked_crc32c
from .records.index import build_index as build_index
from .records.index import check_index as check_index
from .records.index import count_records as count_records
from .records.index import default_index_path as default_index_path
from .records.index import load_index as load_index
from .records.index import save_index as save_index
from .records.reader import ReadStats as ReadStats
from .records.reader import read_records as read_records
from .records.resync import DamagedRegion as DamagedRegion
from .records.writer import RecordWriter as RecordWriter
from .vision.targets import detection_spec as detection_spec
from .vision.targets import segmentation_spec as segmentation_spec
