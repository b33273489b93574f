"""Errors shared across the controller, each with the exit code ``ballast`` gives it,
and the exit codes that are no error of ours."""

#: Ctrl-C (SIGINT), as a shell reports it.
INTERRUPTED = 130
#: The reader of our output went away (``ballast schema | head``).
BROKEN_PIPE = 141


class BallastError(Exception):
    """An expected failure: ``ballast`` prints its message as one line and exits with
    ``exit_code``, no traceback."""

    exit_code = 1


class InputError(BallastError, ValueError):
    """A file or value a user gave us is unreadable or malformed; the message says where."""

    exit_code = 2


class UnreachableError(BallastError, ConnectionError):
    """A broker or the controller's API did not answer; the message names the address and
    what to check."""

    exit_code = 3


class RefusedError(BallastError, RuntimeError):
    """The controller answered but refused: unknown group or member, wrong token."""

    exit_code = 4


class CredentialsError(BallastError, PermissionError):
    """A broker refused our credentials (authentication or authorisation) or its
    certificate did not verify: retrying cannot help. The message names what to check."""

    exit_code = 5
