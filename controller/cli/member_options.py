"""Argument types for a member's identity, rack, capacity and keys (``worker``,
``keys``, ``audit``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from assignors import check_capacity, check_rack
from controller.adapters.presence import MqttAuth
from controller.errors import InputError
from controller.wire.member_keys import MEMBER_ID
from controller.wire.signing import KeyFileError, Verifier


def capacity_arg(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--capacity: expected a number, got {value!r}") from None
    try:
        return check_capacity(number, "--capacity")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def rack_arg_value(value: str) -> str:
    try:
        return check_rack(value, "--rack")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def member_name(value: str) -> str:
    """A member id as presence and heartbeats carry it (it names a key file, too)."""
    if not MEMBER_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"--member: {value[:80]!r} is not a member id (1-255 of A-Z a-z 0-9 . _ - : @)"
        )
    return value


def verifier_from(paths: list[Path] | None) -> Verifier | None:
    """``--public-key`` given once or more (the old and the new key while one replaces
    the other); None when not given."""
    if not paths:
        return None
    try:
        return Verifier.from_files(paths)
    except KeyFileError as exc:
        raise InputError(f"--public-key: {exc}") from None


def mqtt_login(user: str | None, password_file: Path | None) -> MqttAuth | None:
    if (user is None) != (password_file is None):
        raise InputError("--mqtt-user and --mqtt-password-file go together")
    if user is None or password_file is None:
        return None
    try:
        password = password_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InputError(f"--mqtt-password-file {password_file}: {exc.strerror}") from None
    return MqttAuth(user, password)
