"""Layer 4, other people's systems: TFDS directories (:mod:`.tfds`), Ray Data (:mod:`.ray`), Spark
(:mod:`.spark`) and Apache Beam (:mod:`.beam`), the last two sharing :mod:`.ranges`.

Each is imported on its own; optional dependencies are imported lazily, with an install hint.
"""
