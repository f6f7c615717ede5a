"""The differential test against plain Spark: random cases, each run through misa and Spark, compared per batch."""
