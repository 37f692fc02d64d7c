"""Layer 0, under everything: the compiled extension and the choice to use it, seeds, install
hints for optional extras, the optional libraries and the switch that hides them, worker processes,
and text for people (plurals, progress bars).

Imports nothing of the library but :mod:`torch_tfrecord.errors`, and nothing heavy (no torch).
"""
