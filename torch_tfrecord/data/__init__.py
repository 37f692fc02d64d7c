"""Layer 3, what reaches the training loop: the datasets and everything that decides which
records a rank and worker reads, in which order, and how batches reach the DataLoader.

The order and partition (:mod:`.order`, :mod:`.order.permutation`) are pure functions of (seed,
epoch, sizes, world); :mod:`.dataset` and :mod:`.indexed` only wire the pieces together.
"""
