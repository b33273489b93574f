"""The protocol every Ballast process and client speaks: records, keys, headers,
topic names, presence, the fencing rule. Importable alone."""
