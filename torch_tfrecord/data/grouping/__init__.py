"""Sequences grouped: token sequences and their lengths, packing into rows, length buckets, and
the datasets whose units are such groups."""
