"""The protocol every Ballast process and client speaks: records and their schemas,
keys, headers, topic names, the fencing rule, and Kafka answers read from and requests
written to bytes. Pure: no event loop, no client library (a contract says so)."""
