"""Ballast's side of aiokafka and aiomqtt: every use of their internals (each named and
commented where it is made), and the connection, topic and send helpers that the client
library, the daemon and the lag pipeline share. Pinned below the next minor release of
either library (pyproject.toml): a change there is met here and nowhere else."""
