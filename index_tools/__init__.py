"""index_tools: build and check TFRecord index files for many shards at once."""

from .build import BuildResult, IndexCheck, build_indexes, index_path_for, index_status

__all__ = ["BuildResult", "IndexCheck", "build_indexes", "index_path_for", "index_status"]
