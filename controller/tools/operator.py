"""``ballast status``, ``describe`` and the admin actions: a client of the controller's
HTTP API (docs/operations.md, "HTTP API"), shaped like ``kafka-consumer-groups`` and
``kubectl``: a table on a terminal, JSON otherwise, one clear line when something is
wrong and an exit code saying what (``controller.errors``).

The token for the actions comes from ``BALLAST_TOKEN`` or a file (``--token-file`` or
``BALLAST_TOKEN_FILE``), never from the command line, where ``ps`` and shell history
would keep it.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.errors import InputError, RefusedError, UnreachableError

DEFAULT_URL = "http://127.0.0.1:8080"
RECENT_SHOWN = 5


@dataclass(frozen=True)
class AdminApi:
    """The controller's HTTP API at ``url``."""

    url: str
    token: str | None = None
    cafile: Path | None = None
    timeout: float = 10.0

    @classmethod
    def from_env(
        cls,
        url: str | None,
        token_file: Path | None,
        cafile: Path | None,
        environ: Mapping[str, str] = os.environ,
    ) -> AdminApi:
        url = (url or environ.get("BALLAST_URL") or DEFAULT_URL).rstrip("/")
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InputError(f"--url / BALLAST_URL: not an http(s) URL: {url!r}")
        token = environ.get("BALLAST_TOKEN") or None
        named = environ.get("BALLAST_TOKEN_FILE")
        path = token_file or (Path(named) if named else None)
        if path is not None:
            try:
                token = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise InputError(f"token file {path}: cannot read: {exc.strerror or exc}") from exc
        ca_named = environ.get("BALLAST_CACERT")
        ca = cafile or (Path(ca_named) if ca_named else None)
        return cls(url, token, ca)

    def get(self, path: str) -> dict[str, Any]:
        return self._call("GET", path)

    def post(self, path: str) -> dict[str, Any]:
        return self._call("POST", path)

    def patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("PATCH", path, json.dumps(body).encode())

    def _call(self, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        context = None
        if self.url.startswith("https:"):
            context = ssl.create_default_context(cafile=str(self.cafile) if self.cafile else None)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as r:
                return _json(self.url, r.read())
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                why = str(_json(self.url, body).get("error", exc.reason))
            except UnreachableError:
                why = str(exc.reason)
            if exc.code == 400:  # the request named something wrong: a usage error
                raise InputError(why) from None
            raise RefusedError(_refusal(exc.code, why, method, path)) from None
        except (urllib.error.URLError, OSError) as exc:
            why = str(exc.reason if isinstance(exc, urllib.error.URLError) else exc)
            raise UnreachableError(
                f"cannot reach the controller at {self.url}: {why}; check --url / BALLAST_URL "
                "and that `ballast run` is up"
            ) from None


def _json(url: str, body: bytes) -> dict[str, Any]:
    try:
        out = json.loads(body)
    except ValueError:
        out = None
    if not isinstance(out, dict):
        raise UnreachableError(f"{url} did not answer like a Ballast controller (not JSON)")
    return out


def _refusal(code: int, why: str, method: str, path: str) -> str:
    if code == 401:
        return (
            f"{why} (401): set BALLAST_TOKEN or BALLAST_TOKEN_FILE to the controller's "
            "http.admin_token"
        )
    if code == 404 and method == "GET" and not path.startswith("/v1/groups/"):
        return f"not a Ballast controller API: {method} {path} answered 404"
    return f"{why} ({code})"


# ---------------------------------------------------------------------------- commands


def status(api: AdminApi) -> dict[str, Any]:
    """What this replica leads (``/v1/groups``)."""
    return api.get("/v1/groups")


def describe(api: AdminApi, group: str, partitions: bool = False) -> dict[str, Any]:
    query = "?partitions=true" if partitions else ""
    return api.get(f"/v1/groups/{urllib.parse.quote(group, safe='')}{query}")


def act(
    api: AdminApi, action: str, group: str, member: str | None = None, *, force: bool = False
) -> dict[str, Any]:
    """``force``: a drain that leaves a topic unread is refused (409) without it."""
    path = f"/v1/groups/{urllib.parse.quote(group, safe='')}"
    if member is not None:
        path += f"/members/{urllib.parse.quote(member, safe='')}"
    return api.post(f"{path}/{action}" + ("?force=true" if force else ""))


# ---------------------------------------------------------------------------- rendering


def constraints(
    api: AdminApi,
    group: str,
    change: Mapping[str, Any] | None = None,
    *,
    allow_unknown_members: bool = False,
    strict: bool = False,
) -> dict[str, Any]:
    """The group's constraints; with ``change`` (a ``ConstraintPatch`` body), changed
    first: refused when it names what the group does not have (unless members are
    ``allow_unknown_members``) or, ``strict``, when it would leave partitions unread."""
    path = f"/v1/groups/{urllib.parse.quote(group, safe='')}/constraints"
    if change is None:
        return api.get(path)
    options = {"allow_unknown_members": allow_unknown_members, "strict": strict}
    query = urllib.parse.urlencode({k: "true" for k, on in options.items() if on})
    return api.patch(f"{path}?{query}" if query else path, change)


def render_constraints(view: Mapping[str, Any]) -> str:
    """One row per constraint in force, saying where it comes from."""
    overrides = view["overrides"]
    mine = {(p["topic"], p["partition"]) for p in overrides["pins"]}
    rows: list[tuple[object, ...]] = [
        (
            "pin",
            f"{p['topic']}:{p['partition']}",
            p["member"],
            _origin((p["topic"], p["partition"]) in mine),
        )
        for p in view["effective"]["pins"]
    ]
    rows += [
        ("max-partitions", m, cap, _origin(m in overrides["max_partitions"]))
        for m, cap in sorted(view["effective"]["max_partitions"].items())
    ]
    rows += [
        ("rack", m, rack, _origin(m in overrides["racks"]))
        for m, rack in sorted(view["effective"]["racks"].items())
    ]
    lines = [table(("KIND", "WHAT", "VALUE", "FROM"), rows) if rows else "no constraints"]
    unassigned = view["unassigned"]
    if unassigned:
        shown = ", ".join(f"{t}:{p}" for t, p in unassigned[:10])
        more = f" and {len(unassigned) - 10} more" if len(unassigned) > 10 else ""
        lines.append(f"unassigned (every subscriber at its cap): {shown}{more}")
    for broken in view["violations"]:
        lines.append(f"VIOLATION: {broken}")
    return "\n".join(lines)


def _origin(override: bool) -> str:
    return "admin API" if override else "config"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart, like ``kubectl get``."""
    cells = [list(headers), *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def render_status(view: Mapping[str, Any]) -> str:
    groups: Mapping[str, Mapping[str, Any]] = view["groups"]
    header = f"replica {view.get('replica')}  (ha: {'on' if view.get('ha') else 'off'})"
    if view.get("waiting_for"):
        header += "  NOT READY: " + ", ".join(view["waiting_for"])
    if not groups:
        return f"{header}\nthis replica leads no group"
    rows = [
        (
            name,
            g["generation"],
            g["controller_epoch"],
            g["members"],
            g["partitions"],
            g["total_lag"],
            g["max_member_lag"],
            g["lag_skew"],
            g["revoking"],
            g["state"],
        )
        for name, g in groups.items()
    ]
    headers = (
        "GROUP", "GENERATION", "EPOCH", "MEMBERS", "PARTITIONS", "LAG", "MAX-MEMBER-LAG",
        "SKEW", "HANDOFFS", "STATE",
    )  # fmt: skip
    return f"{header}\n{table(headers, rows)}"


def _capacity(value: object) -> str:
    """A capacity as declared (1 when none was): 2, not 2.0."""
    return f"{value:g}" if isinstance(value, int | float) else "1"


def render_describe(view: Mapping[str, Any], partitions: bool = False, wide: bool = False) -> str:
    members: Mapping[str, Mapping[str, Any]] = view["members"]
    q = view["quality"]
    lines = [
        f"group {view['group']}  state {view['state']}  generation {view['generation']}  "
        f"epoch {view['controller_epoch']}",
        f"lag {q['total_lag']}  max member lag {q['max_member_lag']}  "
        f"skew {q['lag_skew']:.2f}  count spread {q['count_spread']}  "
        f"cross-rack {q.get('cross_rack', 0)}",
    ]
    sizing = view.get("autoscale")
    if sizing:
        lines.append(f"desired members {sizing['desired']} (now {sizing['current']}): "
                     f"{sizing['reason']}")  # fmt: skip
        if sizing.get("remove_first"):
            lines.append("stop first (least lag held): " + ", ".join(sizing["remove_first"]))
    lines.append("")
    rows = [
        (
            member,
            m.get("state"),
            len(m["granted"]),
            len(m["target"]),
            m["lag"],
            m["applied_generation"],
            _ago(m.get("last_heard_seconds_ago")),
            m.get("rack"),
            _capacity(m.get("capacity")),
            ",".join(m["topics"]),
        )
        for member, m in members.items()
    ]
    headers = (
        "MEMBER", "STATE", "PARTITIONS", "TARGET", "LAG", "APPLIED-GEN", "LAST-ACK", "RACK",
        "CAPACITY", "TOPICS",
    )  # fmt: skip
    lines.append(table(headers, rows) if rows else "no members")
    revoking = view.get("revoking") or []
    if revoking:
        lines += ["", f"handoffs in flight: {len(revoking)}"]
        lines.append(
            table(
                ("TOPIC", "PARTITION", "REVOKING-FROM", "SINCE-GEN"),
                [
                    (r["partition"][0], r["partition"][1], r["from"], r["generation"])
                    for r in revoking
                ],
            )
        )
    recent = view.get("recent_rebalances") or []
    if recent:
        lines += ["", "recent rebalances:"]
        lines += [
            f"  {time.strftime('%H:%M:%S', time.localtime(r['at']))}  generation "
            f"{r['generation']}  {r['why']}"
            for r in recent[-RECENT_SHOWN:]
        ]
    unread = view.get("unassigned") or []
    if unread:
        lines += ["", f"{len(unread)} partition(s) have no reader (state degraded)"]
    if partitions:
        columns: tuple[str, ...] = (
            "TOPIC", "PARTITION", "MEMBER", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
            "SMOOTHED-LAG",
        )  # fmt: skip
        if wide:
            columns += ("INSTANCE", "RACK")
        owned = [
            (
                p["topic"],
                p["partition"],
                p["member"] or "-",
                _cell(p.get("committed")),
                _cell(p.get("log_end")),
                _cell(p.get("raw_lag")),
                p["lag"],
                *((_cell(p.get("instance")), _cell(p.get("rack"))) if wide else ()),
            )
            for p in view.get("partitions", [])
        ]
        lines += ["", table(columns, owned) if owned else "no partitions"]
    return "\n".join(lines)


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s ago"


def render_action(result: Mapping[str, Any]) -> str:
    group, member = result["group"], result.get("member")
    unread = result.get("unread_topics") or []
    if result["action"] == "drain" and unread:
        return (
            f"draining {member} in {group}: nobody is left to read {', '.join(unread[:5])} "
            "(the group is degraded until a member that subscribes joins or is undrained)"
        )
    return {
        "pause": f"paused {group}: events wait until `ballast resume {group}`",
        "resume": f"resumed {group}",
        "rebalance": f"rebalance of {group} requested, with a fresh look at lag",
        "drain": f"draining {member} in {group}: its partitions move to other members",
        "undrain": f"{member} in {group} takes partitions again",
    }[result["action"]]
