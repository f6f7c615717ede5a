"""The spark-submit jobs (CM, Linear Road, NEXMark, YSB, Spark-API queries), what they share (the command line and
runs, stages, schemas, the Kafka source and sink) and their input generators."""
