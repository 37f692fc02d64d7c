"""GZIP / ZLIB shards read by record: the ``.cidx`` index format (:mod:`.index`, pure) and
inflating from decompressor seek points (:mod:`.inflate`)."""
