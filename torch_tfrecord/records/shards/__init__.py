"""A dataset's shards, resolved once: the user's sources listed (or a manifest read), each
shard's kind, index and record count decided, and records read from them by global id."""
