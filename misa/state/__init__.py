"""The state: the RocksDB store and its checkpoints, the running batch's view, commit buffers, codecs."""
