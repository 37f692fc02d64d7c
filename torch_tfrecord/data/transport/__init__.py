"""How batches reach the training loop: collating, the hand-off from DataLoader workers (one
block of memory per batch, the byte ring), prefetching, threads in the loading process and a
loading process of its own."""
