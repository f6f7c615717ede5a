"""misa's state as Spark DataFrames: ``format("misa-state")`` and ``format("misa-state-metadata")``.

:mod:`.operator_record` keeps the operator beside the state, :mod:`.locate` finds a state and its versions,
:mod:`.shard_read` reads one shard of a version on an executor, :mod:`.row_diff` makes the change feed's rows and
:mod:`.sources` are the data sources (``misa.register_state_sources(spark)`` registers them).
"""
