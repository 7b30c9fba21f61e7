"""How the drivers reach the stored trace: the requests read into arrays or streamed once
in arrival order (`trace`, `token_stream`, `streamed`), the matcher's sources over the
store (`sources`), a store or a Parquet dataset as input (`inputs`), partitions and shards
handed to executors (`partitions`, `sharded`, `workers`), and the geometry a hash-id trace
can express (`geometry`). Below `pipeline`'s drivers, above the pure stages it feeds."""
