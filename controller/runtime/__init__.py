"""The daemon and its I/O: Kafka, MQTT membership, the election, HTTP, metrics,
configuration."""
