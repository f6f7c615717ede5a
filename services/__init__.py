"""The local services the project starts: its Kafka broker (installer, client, ``misa kafka``), a private Redis
server, an S3 server on loopback (moto's) and free loopback ports."""
