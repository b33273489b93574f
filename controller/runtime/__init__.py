"""The daemon: Kafka and MQTT membership, the election, the group loops, HTTP, metrics."""
