"""Errors shared across the controller."""


class InputError(ValueError):
    """A file or value a user gave us is unreadable or malformed; the message says where."""
