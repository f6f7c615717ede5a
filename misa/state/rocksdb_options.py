"""RocksDB options for state shards, from the MiSA configuration."""

from __future__ import annotations

import rocksdict

from misa.config import MisaConfig

_COMPRESSION = {
    "none": rocksdict.DBCompressionType.none,
    "snappy": rocksdict.DBCompressionType.snappy,
    "lz4": rocksdict.DBCompressionType.lz4,
    "zstd": rocksdict.DBCompressionType.zstd,
    "zlib": rocksdict.DBCompressionType.zlib,
}


def shard_options(config: MisaConfig, block_cache: rocksdict.Cache) -> rocksdict.Options:
    """Raw-mode options for one shard; ``block_cache`` is shared by all shards."""
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(config.rocksdb_write_buffer_bytes)
    options.set_max_write_buffer_number(config.rocksdb_max_write_buffers)
    options.set_level_zero_file_num_compaction_trigger(config.rocksdb_l0_compaction_trigger)
    options.set_compression_type(_COMPRESSION[config.rocksdb_compression]())
    options.set_use_direct_reads(config.rocksdb_direct_reads)
    options.set_max_background_jobs(config.rocksdb_background_jobs)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(block_cache)
    table.set_block_size(config.rocksdb_block_bytes)
    if config.rocksdb_bloom_bits:
        table.set_bloom_filter(config.rocksdb_bloom_bits, False)
    options.set_block_based_table_factory(table)
    return options


def unlogged_writes() -> rocksdict.WriteOptions:
    """Writes without the WAL: durability comes from checkpoints, not from the log."""
    options = rocksdict.WriteOptions()
    options.disable_wal = True
    return options
