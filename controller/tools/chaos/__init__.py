"""The fault suite, Jepsen-style: ``nemesis`` runs a seeded sequence of named faults
against real processes (brokers, HA replicas, workers) and records a history;
``checker`` reads that history and the workers' outputs and says which invariant broke
and where. Used by tests/controller/tools/test_chaos.py (short) and benchmarks/chaos_bench.py
(runs of 100+ faults)."""
