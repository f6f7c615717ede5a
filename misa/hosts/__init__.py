"""The state on Spark's executors (``spark.misa.state.placement=executors``): one long-lived state host per key
partition, placed and supervised by Spark as a background job of one task per partition (:mod:`.launch`,
:mod:`.host_task`).

A host serves its partition's :class:`~misa.parallel.worker.PartitionWorker` over Arrow Flight (:mod:`.server`);
Spark's tasks stream each batch's deltas straight to their hosts (:mod:`.send`), and the driver asks the hosts what
it asks the worker processes of the driver placement (:mod:`.client`), so the partition protocol (versions, acks,
markers, recovery) is the same in both placements. A lost host's partition alone moves to a new host, which catches
up from the partition's newest durable version and the driver's record of the requests since (:mod:`.journal`).
"""
