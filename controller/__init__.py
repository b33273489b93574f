"""Ballast controller: daemon and consumer-side client (built on the assignors API)."""
