"""Generated protobuf messages for Example / SequenceExample (see generate.sh)."""

from .example_pb2 import Example, SequenceExample
from .feature_pb2 import BytesList, Feature, FeatureList, FeatureLists, Features, FloatList, Int64List

__all__ = [
    "BytesList",
    "Example",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "Features",
    "FloatList",
    "Int64List",
    "SequenceExample",
]
