"""A dataset's load telemetry: counters per process in shared memory, and ``tt.LoadStats``."""
