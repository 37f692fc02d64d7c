"""What every iterable dataset does per epoch: the driver, the epoch counter, the rank and world,
worker processes' lifetime, and the guards against miswiring."""
