"""The spark-submit jobs (CM, Linear Road, NEXMark, YSB), their input generators, benchmarks and crash soak."""
