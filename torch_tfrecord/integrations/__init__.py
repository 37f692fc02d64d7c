"""Layer 4, other people's systems: TFDS directories (:mod:`.tfds`) and Ray Data (:mod:`.ray`).

Each is imported on its own; optional dependencies are imported lazily, with an install hint.
"""
