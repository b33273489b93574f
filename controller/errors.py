"""Errors shared across the controller, each with the exit code ``ballast`` gives it."""


class InputError(ValueError):
    """A file or value a user gave us is unreadable or malformed; the message says where."""

    exit_code = 2


class UnreachableError(ConnectionError):
    """A broker or the controller's API did not answer; the message names the address and
    what to check."""

    exit_code = 3


class RefusedError(RuntimeError):
    """The controller answered but refused: unknown group or member, wrong token."""

    exit_code = 4
