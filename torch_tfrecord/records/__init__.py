"""Layer 1, the record layer: bytes in files to serialized records and back, with no protobuf
and no torch.

Framing and CRCs, sequential and indexed readers with resync after damage, atomic writers,
the DALI-format offset index, GZIP/ZLIB shards read by seek points (:mod:`.compressed`),
local paths and source expansion (:mod:`.io`), and URLs through fsspec (:mod:`.remote`).
"""
