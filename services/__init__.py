"""The local services the project starts: its Kafka broker (installer, client, ``misa kafka``), a private Redis
server and free loopback ports."""
