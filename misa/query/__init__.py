"""A Spark user's streaming query, as written, run with its stateful operation on misa (:func:`from_query`)."""
