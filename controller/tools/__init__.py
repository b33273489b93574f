"""For operators and developers: the demo, embedded brokers, the simulated fleet,
audit, scenarios, the fault suite."""
