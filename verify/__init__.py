"""The verification tools: the differential test against plain Spark (random cases, their shrinking), the crash
soak and the comparison of whole outputs."""
