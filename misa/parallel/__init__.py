"""The state phase on several cores: worker processes, each owning a key partition of the state.

With ``spark.misa.state.processes`` above 1 the driver routes each batch's deltas by key partition
(:mod:`.routing`) to worker processes through shared memory (:mod:`.shared_arrow`); each worker
(:mod:`.worker`) runs its own copy of the operator over its partition's own state store, view, cache and
commit controller, in the job's commit mode. The driver (:mod:`.pool`, :mod:`.partitioned`) gathers the
emitted rows, and its view of the versions is every partition's: a version counts as locally committed or
durable only when every worker has acked it, and recovery loads one version in every partition.
"""
