"""Daemon configuration: YAML, then environment overrides, validated before anything starts.

Environment overrides use ``BALLAST_`` and ``__`` between levels, e.g.
``BALLAST_KAFKA__BOOTSTRAP_SERVERS=broker:9092`` or ``BALLAST_REBALANCE__DELAY=2s``. Values
are parsed as YAML scalars, except secrets, which are taken as they are (a password may
start with ``#`` or be ``null``). Errors name the key, the reason, and where the value came
from, and never echo a value.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    model_validator,
)

from assignors import check_constraints
from controller.errors import InputError
from controller.wire.member_keys import MemberKeys
from controller.wire.records import ConstraintSet, Name
from controller.wire.signing import KeyFileError, Signer, Verifier, load_public

ENV_PREFIX = "BALLAST_"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _duration(value: object) -> object:
    """Seconds as a number, or a string with a unit: ``250ms``, ``10s``, ``2m``."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 500ms, 10s, 2m)")
        return float(match.group(1)) * _UNIT[match.group(2)]
    return value


Duration = Annotated[float, BeforeValidator(_duration), Field(ge=0, le=86_400)]
PositiveDuration = Annotated[float, BeforeValidator(_duration), Field(gt=0, le=86_400)]
Port = Annotated[int, Field(ge=1, le=65_535)]


class _Section(BaseModel):
    #: No infinities or NaN (YAML has `.inf` and `.nan`): every number here is a bound,
    #: a ratio or a time that must be reached.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _secret_from_files(section: BaseModel, *names: str) -> dict[str, SecretStr]:
    """``<name>_file`` settings read into their secrets (Kubernetes Secrets mounted as
    files); a secret given both ways is an error. Secrets print as ``**********``."""
    out: dict[str, SecretStr] = {}
    for name in names:
        path: Path | None = getattr(section, f"{name}_file")
        if path is None:
            continue
        if getattr(section, name) is not None:
            raise ValueError(f"set {name} or {name}_file, not both")
        try:
            out[name] = SecretStr(path.read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise ValueError(f"{name}_file {path}: cannot read: {exc.strerror or exc}") from exc
    return out


class KafkaSettings(_Section):
    #: Brokers to start from, ``host:port`` separated by commas.
    bootstrap_servers: str = "127.0.0.1:9092"
    #: Prefix of the client ids of the controller's Kafka clients (``<id>-publisher`` and so
    #: on): the name brokers log and quota by.
    client_id: str = "ballast"
    #: Idempotent producer for the assignments topic. Brokers without InitProducerId
    #: (Tansu 0.6) need ``false``; controller_epoch fencing protects either way.
    idempotent_producer: bool = True
    #: How long any request to a broker may take before it counts as failed.
    request_timeout: PositiveDuration = 30.0
    #: How often partition counts and replica racks of the subscribed topics are read
    #: again (also at once when a member names a topic the group has not seen): like
    #: Kafka's ``metadata.max.age.ms``. A read costs O(partitions): ~0.2-0.4 s of CPU at
    #: 100 000 on a slow machine (``benchmarks/metadata_decode.py``).
    metadata_interval: PositiveDuration = 30.0
    #: How often a small Metadata request checks that a broker answers: readiness and
    #: ``ballast_connection_up{connection="kafka"}`` follow it (an unanswered probe
    #: counts after ``min(request_timeout, 3 * probe_interval)``).
    probe_interval: PositiveDuration = 5.0
    #: How the controller reaches the brokers: plain, TLS, SASL, or SASL over TLS.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    #: The SASL mechanism (needs a ``SASL_*`` ``security_protocol``).
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    #: The SASL user.
    sasl_username: str | None = None
    #: The SASL password (prefer ``sasl_password_file`` or the environment).
    sasl_password: SecretStr | None = None
    #: A file holding the SASL password (a mounted Secret); not with ``sasl_password``.
    sasl_password_file: Path | None = None
    #: CA bundle to verify the brokers (default: the system's).
    ssl_cafile: Path | None = None
    #: Client certificate (PEM) for mutual TLS.
    ssl_certfile: Path | None = None
    #: The client certificate's private key (PEM).
    ssl_keyfile: Path | None = None
    #: Password of ``ssl_keyfile``, when it is encrypted.
    ssl_key_password: SecretStr | None = None
    #: A file holding ``ssl_key_password``; not with it.
    ssl_key_password_file: Path | None = None

    @model_validator(mode="after")
    def _auth(self) -> KafkaSettings:
        for name, secret in _secret_from_files(self, "sasl_password", "ssl_key_password").items():
            object.__setattr__(self, name, secret)
        if self.security_protocol.startswith("SASL_") and not (
            self.sasl_mechanism and self.sasl_username and self.sasl_password
        ):
            raise ValueError(
                f"{self.security_protocol} needs sasl_mechanism, sasl_username and "
                "sasl_password (or sasl_password_file)"
            )
        if self.sasl_mechanism and not self.security_protocol.startswith("SASL_"):
            raise ValueError("sasl_mechanism needs security_protocol SASL_PLAINTEXT or SASL_SSL")
        return self


class MqttSettings(_Section):
    #: The MQTT broker members announce their presence on.
    host: str = "127.0.0.1"
    #: Its port (8883 is the usual TLS port).
    port: Port = 1883
    #: Seconds between the controller's keepalives; the broker drops a silent session after
    #: 1.5 times this.
    keepalive: Annotated[int, Field(ge=1, le=3600)] = 5
    #: Presence lives on ``<prefix>/<group>/members/<member>``.
    topic_prefix: Name = "ballast"
    #: The controller's MQTT client id; each replica appends its replica id
    #: (``ha.replica_id``), so that replicas never end each other's session.
    client_id: str = "ballast-controller"
    #: MQTT user (with an ACL: the controller reads ``<prefix>/#``).
    username: str | None = None
    #: MQTT password (prefer ``password_file`` or the environment).
    password: SecretStr | None = None
    #: A file holding the MQTT password; not with ``password``.
    password_file: Path | None = None
    #: Connect over TLS.
    tls: bool = False
    #: CA bundle for the broker's certificate (default: the system's).
    ca_file: Path | None = None
    #: Client certificate (PEM) for mutual TLS (needs ``tls``).
    cert_file: Path | None = None
    #: The client certificate's private key (PEM).
    key_file: Path | None = None

    @model_validator(mode="after")
    def _auth(self) -> MqttSettings:
        for name, secret in _secret_from_files(self, "password").items():
            object.__setattr__(self, name, secret)
        if self.password is not None and not self.username:
            raise ValueError("password needs username")
        if (self.ca_file or self.cert_file) and not self.tls:
            raise ValueError("ca_file/cert_file need tls: true")
        return self


class MembershipSettings(_Section):
    #: Where members announce themselves: ``mqtt`` (retained presence with a Will) or
    #: ``kafka`` (the heartbeat topic).
    source: Literal["mqtt", "kafka"] = "mqtt"
    #: The compacted topic members heartbeat on with ``source: kafka``.
    heartbeat_topic: Name = "ballast.heartbeats"
    #: With ``source: kafka``: a member silent for this long is gone (its leave grace
    #: starts).
    session_timeout: PositiveDuration = 10.0
    #: Most members one group may have: past it, new members' presence is refused
    #: (counted, logged), so names from outside cannot grow the controller without bound.
    max_members: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    #: With ``source: kafka``: a directory of the members' public keys, one
    #: ``<member>.pub`` each (``ballast keys generate --out DIR --member NAME``). Set: a
    #: heartbeat counts only when signed by the key of the member it names and newer
    #: than the last, and a member without a key is not admitted (docs/operations.md,
    #: "Member keys"). Unset: anyone who may write the heartbeat topic can speak for any
    #: member (logged at start). Read again when a key is added or removed (looked at no
    #: more than every 10 s): no restart needed either way.
    member_keys_dir: Path | None = None
    _member_keys: MemberKeys | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _read_member_keys(self) -> MembershipSettings:
        """Read once, here: a bad key file is a config error, named by ``check-config``."""
        if self.member_keys_dir is None:
            return self
        if self.source != "kafka":
            raise ValueError(
                "member_keys_dir needs source: kafka (over MQTT the broker's ACL keeps "
                "members apart)"
            )
        try:
            self._member_keys = MemberKeys.from_dir(self.member_keys_dir)
        except KeyFileError as exc:
            raise ValueError(str(exc)) from None
        return self

    def member_keys(self) -> MemberKeys | None:
        """The keys as read at start (None: heartbeats are not checked)."""
        return self._member_keys


class LagSettings(_Section):
    #: ``poll``: read committed and end offsets; ``topic``: lag records; ``none``: no lag.
    source: Literal["poll", "topic", "none"] = "poll"
    #: With ``source: poll``: how often committed and end offsets are read.
    poll_interval: PositiveDuration = 5.0
    #: With ``source: topic``: the compacted topic of lag records the Spark lag job writes.
    topic: Name = "ballast.lag"
    #: Weight of a new lag reading in the moving average (1: no smoothing).
    smoothing: Annotated[float, Field(gt=0, le=1)] = 0.3
    #: Readings one tick of a group hands its assignor, and lag records read from the
    #: lag topic between two yields of the event loop: a poll of every partition, or a
    #: backlog of records, is absorbed over several ticks, so no tick stalls on it
    #: (docs/operations.md).
    batch: Annotated[int, Field(ge=100, le=1_000_000)] = 2000
    #: Lag of a partition with no committed offset, as KAFKA-5337: latest -> 0,
    #: earliest -> everything retained.
    auto_offset_reset: Literal["latest", "earliest"] = "latest"
    #: What the assignor balances (see docs/protocol.md, "Weights"): offsets behind, time
    #: behind (ms) or produce rate (offsets/s). The last two come from the Spark lag job.
    weight: Literal["offsets", "time", "rate"] = "offsets"
    #: When set, the controller polls offsets (whatever ``source`` is) and writes each raw
    #: reading to this topic for the Spark lag job.
    samples_topic: Name | None = None

    @model_validator(mode="after")
    def _weight_needs_records(self) -> LagSettings:
        if self.weight != "offsets" and self.source != "topic":
            raise ValueError(
                f"weight {self.weight!r} comes from lag records: it needs source: topic"
            )
        return self


class PipelineSettings(_Section):
    """The Spark lag job (``ballast pipeline lag``, docs/pipeline.md)."""

    #: ``ballast_kafka``: the Python source/sink shipped with Ballast (no jars needed);
    #: ``kafka``: Spark's native connector (spark-sql-kafka on the cluster), same options.
    kafka_format: Literal["ballast_kafka", "kafka"] = "ballast_kafka"
    #: Spark master of the lag job (``local[N]``, or what spark-submit sets).
    master: str = "local[2]"
    #: The streaming query's checkpoint directory (a path, or ``s3a://``).
    checkpoint: str = "ballast-pipeline-checkpoint"
    #: Where a new query starts reading the samples topic.
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    #: How often a micro-batch runs.
    trigger_interval: PositiveDuration = 5.0
    #: Watermark delay: samples later than this (event time) are dropped and counted.
    lateness: Duration = 30.0
    #: Produce and consume rates are measured over this much of the newest event time.
    rate_window: PositiveDuration = 60.0
    #: (offset, time) points kept per partition for time-lag interpolation.
    history: PositiveDuration = 900.0
    #: Most (offset, time) points kept per partition within ``history``.
    max_points: Annotated[int, Field(ge=2, le=10_000)] = 120
    #: A partition without samples for this long (event time) gets a tombstone.
    age_out: PositiveDuration = 300.0
    #: Most samples one micro-batch reads (unset: all available): bounds a batch after
    #: downtime.
    max_offsets_per_trigger: Annotated[int, Field(ge=1)] | None = None
    #: Fixed in the checkpoint once a query has run (Spark's state partitioning).
    shuffle_partitions: Annotated[int, Field(ge=1, le=10_000)] = 4
    #: Partitions share this many Spark state keys, so Spark's per-key cost is paid per
    #: bucket, not per partition. 0: one state key per partition, the layout of
    #: checkpoints written before buckets existed. Fixed in the checkpoint, as above.
    state_buckets: Annotated[int, Field(ge=0, le=100_000)] = 64
    #: Prometheus port of the job's driver; 0 disables.
    metrics_port: Annotated[int, Field(ge=0, le=65_535)] = 0
    #: For an ``s3a://`` checkpoint (docs/pipeline.md): an S3-compatible endpoint (None:
    #: AWS S3), buckets addressed by path (MinIO, moto) or by host name, and the region.
    #: Credentials come from the environment (AWS_*), never from this file.
    s3_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None
    #: Address S3 buckets by path (MinIO, moto) instead of by host name.
    s3_path_style: bool = False
    #: The S3 region.
    s3_region: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$")] = "us-east-1"

    @model_validator(mode="after")
    def _windows(self) -> PipelineSettings:
        if self.history < self.rate_window:
            raise ValueError("history must be at least rate_window")
        return self


class RebalanceSettings(_Section):
    #: Membership events are coalesced for this long before a rebalance (each new one
    #: extends the wait).
    delay: Duration = 1.0
    #: An empty group's first rebalance waits for joins to stop (``delay`` without one),
    #: at most this long: Kafka's ``group.initial.rebalance.delay.ms``, same default.
    initial_delay: Duration = 3.0
    #: Joins to a group with members hold its rebalance while they keep arriving (each
    #: extends the wait by ``delay``), at most this long: a scale-out is one placement, not
    #: one per wave. Leaves never wait on joins. At most ``delay``: no holding.
    max_delay: Duration = 3.0
    #: A member whose presence is lost keeps its partitions this long: one that comes back
    #: (a restart) moves nothing.
    leave_grace: Duration = 10.0
    #: An owner that does not acknowledge a revoke within this long is declared dead and its
    #: partitions are granted anyway.
    handoff_timeout: PositiveDuration = 15.0
    #: Acks arriving within this window are granted in one publication.
    grant_batch: Annotated[float, BeforeValidator(_duration), Field(ge=0, le=1)] = 0.02
    #: Lag-only moves start when the largest member lag exceeds this multiple of the best
    #: possible largest lag.
    trigger_ratio: Annotated[float, Field(ge=1)] = 1.25
    #: ... and stop once it is within this multiple (at most ``trigger_ratio``).
    target_ratio: Annotated[float, Field(ge=1)] = 1.05
    #: Most partitions one rebalance moves for lag alone (0: lag never moves anything).
    max_moves: Annotated[int, Field(ge=0)] = 16
    #: Lag skew below this many messages is ignored. For an autoscaled group, about a
    #: second of a member's work, with a ``lag_cooldown`` of seconds: members that drained
    #: their share of a backlog then take the rest (docs/operations.md, "Autoscaling").
    min_lag: Annotated[int, Field(ge=0)] = 1_000
    #: A lag step is taken only when it lowers the largest member lag by this fraction.
    min_gain: Annotated[float, Field(ge=0, lt=1)] = 0.05
    #: After partitions moved for lag, none moves for lag for this long; doubled up to
    #: ``lag_backoff_max`` while the same member stays the most lagged at no lower lag
    #: (moves that do not help it are not repeated every poll). 0: no wait.
    lag_cooldown: Duration = 30.0
    #: The longest the doubled lag cooldown grows to.
    lag_backoff_max: Duration = 600.0

    @model_validator(mode="after")
    def _ratios(self) -> RebalanceSettings:
        if self.target_ratio > self.trigger_ratio:
            raise ValueError("target_ratio must not exceed trigger_ratio")
        return self


class HaSettings(_Section):
    """Several replicas, one leader per group (docs/operations.md, "High availability")."""

    #: Run several replicas that elect one leader per shard of groups over the control
    #: topic.
    enabled: bool = False
    #: One partition per shard; groups hash onto shards (CRC-32 of the name).
    control_topic: Name = "ballast.control"
    #: Shards groups are spread over (fixed once replicas run: changing it moves every
    #: group's leader).
    shards: Annotated[int, Field(ge=1, le=1_000)] = 12
    #: The Kafka consumer group the replicas elect shard leaders in.
    election_group: Name = "ballast-controllers"
    #: A silent leader loses its shards after this long (Kafka group session timeout).
    session_timeout: Annotated[float, BeforeValidator(_duration), Field(ge=1, le=300)] = 6.0
    #: How often a replica heartbeats in the election group (at most a third of
    #: ``session_timeout``).
    heartbeat_interval: Annotated[float, BeforeValidator(_duration), Field(gt=0, le=60)] = 1.0
    #: Identifies this replica in logs and /v1/leadership (default: host name and pid).
    replica_id: str | None = None
    #: Publish through one transactional producer per shard, ``<prefix>-<shard>``: a new
    #: leader's init_transactions fences the old leader's producer. Needs a broker with
    #: transactions (Apache Kafka; not Tansu 0.6). Epoch fencing applies either way.
    transactional_id_prefix: Name | None = None

    @model_validator(mode="after")
    def _timing(self) -> HaSettings:
        if self.heartbeat_interval * 3 > self.session_timeout:
            raise ValueError("heartbeat_interval must be at most a third of session_timeout")
        return self


class AutoscaleSettings(_Section):
    """A member count recommended for the group (``ballast_desired_members``, ``describe``,
    the admin API): enough to keep up with ``headroom`` to spare and to drain the backlog
    within ``drain_time`` (docs/operations.md, "Autoscaling"). Needs offsets polled
    (``lag.source: poll``, or ``lag.samples_topic`` set)."""

    #: Never recommend fewer members than this.
    min_members: Annotated[int, Field(ge=1, le=100_000)] = 1
    #: Never recommend more (nor more than the group has partitions).
    max_members: Annotated[int, Field(ge=1, le=100_000)] = 100
    #: Spare processing capacity to keep: 0.2 recommends 20 % more than the input needs
    #: for the member holding the most partitions; a scale-up leaves twice as much, a
    #: scale-down waits until the members would keep more than twice.
    headroom: Annotated[float, Field(ge=0, le=10)] = 0.2
    #: The backlog should be drained within this time.
    drain_time: PositiveDuration = 600.0
    #: From asking for a member to its processing (a pod scheduled, pulled, started and
    #: connected): the backlog grows meanwhile, and is counted as it will be then.
    start_time: Duration = 30.0
    #: Input and processing rates are measured over this window (a rise in the input
    #: counts over its last 5 s).
    rate_window: PositiveDuration = 60.0
    #: A lower count is recommended only once every recommendation of this long was
    #: lower, and those agree within 10 % (at most two delays more).
    scale_down_delay: Duration = 300.0

    @model_validator(mode="after")
    def _ordered(self) -> AutoscaleSettings:
        if self.min_members > self.max_members:
            raise ValueError(
                f"min_members ({self.min_members}) is above max_members ({self.max_members})"
            )
        if self.start_time >= self.drain_time:
            raise ValueError(
                f"start_time ({self.start_time:g} s) is not below drain_time"
                f" ({self.drain_time:g} s): the backlog could never be drained in time"
            )
        return self


class GroupSettings(_Section):
    #: The consumer group's name: members announce themselves under it.
    name: Name
    #: The consumer group id the fleet commits offsets under (default: ``name``).
    commit_group: Name | None = None
    #: Pins, caps and rack overrides (docs/operations.md, "Constraints"); the admin API
    #: lays its own over these, entry by entry.
    constraints: ConstraintSet = ConstraintSet()
    #: Recommend a member count for autoscaling (off when unset).
    autoscale: AutoscaleSettings | None = None

    @model_validator(mode="after")
    def _consistent(self) -> GroupSettings:
        c = self.constraints
        check_constraints(c.pinned(), c.max_partitions)
        return self

    @property
    def offsets_group(self) -> str:
        return self.commit_group or self.name


class AssignmentsTopic(_Section):
    #: The compacted topic the assignments are published on (created if missing; refused if
    #: not compacted).
    name: Name = "ballast.assignments"
    #: Compacted, one record per group: the constraints set through the admin API.
    constraints_topic: Name = "ballast.constraints"
    #: Used only when Ballast creates the topic.
    partitions: Annotated[int, Field(ge=1, le=10_000)] = 12
    #: Replicas of every topic Ballast creates (assignments, constraints, lag, samples,
    #: heartbeats, control). Unset: 3, or every broker of a smaller cluster; more than the
    #: cluster's brokers is refused at start.
    replication_factor: Annotated[int, Field(ge=1, le=32)] | None = None


class HttpSettings(_Section):
    #: Address the HTTP server (metrics, health, the API) listens on.
    host: str = "127.0.0.1"
    #: Its port (0: any free port).
    port: Annotated[int, Field(ge=0, le=65_535)] = 8080
    #: A port of their own for ``/metrics``, ``/healthz`` and ``/readyz`` (0: any free
    #: port), so a NetworkPolicy can open them to Prometheus without opening the API.
    #: Unset: they are served on ``port`` only.
    metrics_port: Annotated[int, Field(ge=0, le=65_535)] | None = None
    #: Connections each listener holds at most; at the cap the one idle longest is closed
    #: for the new one (the process's file descriptors stay bounded whoever connects).
    max_connections: Annotated[int, Field(ge=1, le=65_536)] = 512
    #: A connection that has not sent a whole request (headers, or a body) within this
    #: time since it opened or since its last answer is closed.
    idle_timeout: PositiveDuration = 15.0
    #: Bearer token for the mutating endpoints (pause, resume, rebalance, drain). Unset:
    #: they answer 403 and the API is read-only.
    admin_token: SecretStr | None = None
    #: A file holding ``admin_token``; not with it.
    admin_token_file: Path | None = None

    @model_validator(mode="after")
    def _token(self) -> HttpSettings:
        if self.metrics_port is not None and self.metrics_port == self.port != 0:
            raise ValueError("metrics_port must differ from port (unset it to share one)")
        for name, secret in _secret_from_files(self, "admin_token").items():
            object.__setattr__(self, name, secret)
        token = self.admin_token.get_secret_value() if self.admin_token else None
        if token is not None and len(token) < 16:
            raise ValueError("admin_token must be at least 16 characters")
        return self


class KedaSettings(_Section):
    """KEDA's external scaler over gRPC: ScaledObjects scale on the groups' recommended
    member counts (``groups[].autoscale``; docs/operations.md, "Autoscaling")."""

    #: Serve it (needs the ``keda`` extra: ``pip install 'ballast[keda]'``).
    enabled: bool = False
    #: Address it listens on (the chart sets 0.0.0.0).
    host: str = "127.0.0.1"
    #: Its port (0: any free port).
    port: Annotated[int, Field(ge=0, le=65_535)] = 6000
    #: StreamIsActive streams open at once at most (KEDA keeps one per ScaledObject);
    #: more are answered RESOURCE_EXHAUSTED.
    max_streams: Annotated[int, Field(ge=1, le=100_000)] = 1_000


class SigningSettings(_Section):
    #: The controller's Ed25519 private key (PEM; ``ballast keys generate``). Set: every
    #: assignment, fence and constraints record is signed with it, and a takeover counts
    #: only records that verify with its public key (give that to the consumers). Unset:
    #: nothing is signed or checked, and anyone who may write the topics can grant.
    private_key_file: Path | None = None
    #: Public keys of keys this one replaces (PEM files): records they signed still count
    #: at a takeover, and are signed again with the new key (docs/operations.md,
    #: "Rotating the signing key"). Remove them once ``ballast_signing_members_behind``
    #: reads 0.
    previous_public_keys: Annotated[list[Path], Field(max_length=8)] = []
    #: With a key: only signed records count at a takeover. ``false`` while turning
    #: signing on for a running fleet: the unsigned records written before count too
    #: (and are signed again); a record signed with any other key never counts. Without
    #: a key nothing is checked either way (unsigned operation, logged at start).
    required: bool = True
    _signer: Signer | None = PrivateAttr(default=None)
    _previous: list[Ed25519PublicKey] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _loads(self) -> SigningSettings:
        """Read once, here: a bad key file is a config error, named by ``check-config``."""
        try:
            if self.private_key_file is not None:
                self._signer = Signer.from_file(self.private_key_file)
            self._previous = [load_public(path) for path in self.previous_public_keys]
        except KeyFileError as exc:
            raise ValueError(str(exc)) from None
        if self._previous and self._signer is None:
            raise ValueError(
                "previous_public_keys needs private_key_file: the key that replaces them"
            )
        return self

    def signer(self) -> Signer | None:
        return self._signer

    def unsigned_refusal(self) -> str | None:
        """Why ``ballast run`` refuses this setting: unsigned operation must be chosen
        (``required: false``), never fallen into by a missing key."""
        if self.private_key_file is not None or not self.required:
            return None
        return (
            "signing.private_key_file is not set: give the controller a key (ballast keys "
            "generate --out DIR; docs/production.md), or set signing.required: false for "
            "unsigned operation (anyone who may write the assignments topic can then grant "
            "partitions)"
        )

    def verifier(self) -> Verifier | None:
        """What a takeover counts: the key's own records, its predecessors', and (not
        ``required``) unsigned ones. None: unsigned operation, nothing is checked."""
        if self._signer is None:
            return None
        return self._signer.verifier.with_keys(self._previous, unsigned_ok=not self.required)


class StartupSettings(_Section):
    #: A broker that is not up yet is normal in Kubernetes: the daemon stays alive (not
    #: ready) and retries with backoff for this long, then exits non-zero. 0: one attempt.
    timeout: Duration = 300.0


class MetricsSettings(_Section):
    #: Per-member series (lag, partitions) are opt-in and capped: member ids are unbounded.
    per_member: bool = False
    #: Most members per group with their own series when ``per_member`` is on.
    per_member_cap: Annotated[int, Field(ge=1, le=10_000)] = 50


class LoggingSettings(_Section):
    #: The least severe log level written.
    level: Literal["debug", "info", "warning", "error"] = "info"
    #: ``auto``: console when stderr is a TTY, JSON otherwise.
    format: Literal["auto", "json", "console"] = "auto"


class Config(_Section):
    kafka: KafkaSettings = KafkaSettings()
    mqtt: MqttSettings = MqttSettings()
    membership: MembershipSettings = MembershipSettings()
    lag: LagSettings = LagSettings()
    rebalance: RebalanceSettings = RebalanceSettings()
    assignments: AssignmentsTopic = AssignmentsTopic()
    groups: Annotated[list[GroupSettings], Field(min_length=1)]
    http: HttpSettings = HttpSettings()
    startup: StartupSettings = StartupSettings()
    metrics: MetricsSettings = MetricsSettings()
    logging: LoggingSettings = LoggingSettings()
    pipeline: PipelineSettings = PipelineSettings()
    ha: HaSettings = HaSettings()
    signing: SigningSettings = SigningSettings()
    keda: KedaSettings = KedaSettings()

    @model_validator(mode="after")
    def _transactions_need_shards(self) -> Config:
        if self.ha.transactional_id_prefix and not self.ha.enabled:
            raise ValueError("ha.transactional_id_prefix needs ha.enabled: true (one id per shard)")
        return self

    @model_validator(mode="after")
    def _unique_groups(self) -> Config:
        names = [g.name for g in self.groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"group names must be unique; repeated: {', '.join(dupes)}")
        return self

    def group(self, name: str) -> GroupSettings:
        return next(g for g in self.groups if g.name == name)


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``BALLAST_A__B=v`` -> ``{"a": {"b": v}}`` with ``v`` parsed as a YAML scalar.

    Every key of the config lives in a section, so only names with ``__`` are overrides:
    the operator commands' ``BALLAST_URL``, ``BALLAST_TOKEN_FILE`` and the like are not."""
    out: dict[str, Any] = {}
    for key, raw in sorted(environ.items()):
        if not key.startswith(ENV_PREFIX) or "__" not in key:
            continue
        path = [p.lower() for p in key[len(ENV_PREFIX) :].split("__")]
        value: Any = raw
        if raw.strip() and not _is_secret(path):
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                value = raw
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"environment {key}: conflicts with another override")
        node[path[-1]] = value
    return out


def applied_overrides(environ: Mapping[str, str]) -> list[str]:
    """``BALLAST_X__Y (x.y)`` for each override ``load_config`` applies (names, never
    values: some are secrets)."""
    out = []
    for key in sorted(environ):
        if key.startswith(ENV_PREFIX) and "__" in key:
            path = key[len(ENV_PREFIX) :].lower().split("__")
            out.append(f"{key} ({'.'.join(path)})")
    return out


def misspelt_overrides(environ: Mapping[str, str]) -> list[str]:
    """``BALLAST_*`` names that look like an override but are not read: a config section
    joined to its key by one underscore (``BALLAST_HTTP_PORT``). Other single-underscore
    names (``BALLAST_URL``, ``BALLAST_TOKEN_FILE``) belong to the operator commands."""
    sections = sorted(Config.model_fields, key=len, reverse=True)
    out = []
    for key in sorted(environ):
        rest = key[len(ENV_PREFIX) :].lower() if key.startswith(ENV_PREFIX) else ""
        if not rest or "__" in rest:
            continue
        section = next((s for s in sections if rest.startswith(s + "_")), None)
        if section is not None:
            field = rest[len(section) + 1 :]
            out.append(
                f"environment {key}: not read; did you mean "
                f"{ENV_PREFIX}{section.upper()}__{field.upper()}? (two underscores between "
                "a section and its key)"
            )
    return out


def _is_secret(path: list[str]) -> bool:
    """Does this key path name a secret (``SecretStr``) of the config model?"""
    model: Any = Config
    for part in path[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        model = None if field is None else _section_of(field.annotation)
        if model is None:
            return False
    field = getattr(model, "model_fields", {}).get(path[-1])
    return field is not None and _holds(field.annotation, SecretStr)


def _holds(annotation: Any, kind: type) -> bool:
    """Is ``kind`` the annotation or one of its arguments (``SecretStr | None``)?"""
    return annotation is kind or any(_holds(a, kind) for a in getattr(annotation, "__args__", ()))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, without the offending line (it may hold a password)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if mark is None:
        return str(problem)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> Config:
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    source = str(path) if path else "(defaults)"
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise InputError(f"{path}: invalid YAML: {_yaml_problem(exc)}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise InputError(f"{path}: the top level must be a mapping of sections")
        data = loaded or {}
    overrides = env_overrides(environ)
    merged = _merge(data, overrides)
    try:
        return Config.model_validate(merged)
    except ValidationError as exc:
        lines = []
        for e in exc.errors()[:20]:
            loc = [str(p) for p in e["loc"]]
            where = ".".join(loc) or "(top level)"
            env_keys = _env_keys(overrides, loc)
            origin = f"environment {', '.join(env_keys)}" if env_keys else source
            if e["type"] == "extra_forbidden":
                lines.append(f"{origin}: {where}: unknown key{_did_you_mean(loc)}")
            else:
                lines.append(f"{origin}: {where}: {e['msg']}")
        raise InputError("\n".join(lines)) from exc


def _env_keys(overrides: Mapping[str, Any], loc: list[str]) -> list[str]:
    """The ``BALLAST_*`` variables that set ``loc`` (or something below it); none when
    the value came from the file (or the check spans the whole config)."""
    if not loc:
        return []
    node: Any = overrides
    for part in loc:
        if not isinstance(node, Mapping) or part not in node:
            return []
        node = node[part]

    def names(prefix: list[str], value: Any) -> list[str]:
        if isinstance(value, Mapping) and value:
            return [n for k, v in value.items() for n in names([*prefix, k], v)]
        return [ENV_PREFIX + "__".join(p.upper() for p in prefix)]

    return sorted(names(loc, node))


def _did_you_mean(loc: list[str]) -> str:
    """`` (did you mean `leave_grace`?)`` for a misspelt key at ``loc``, by the fields
    of the section it was found in."""
    model: Any = Config
    for part in loc[:-1]:
        if part.isdigit():
            continue  # a list index (groups[0])
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        model = _section_of(field.annotation)
        if model is None:
            return ""
    known = list(getattr(model, "model_fields", {}))
    close = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else f" (known: {', '.join(known)})"


def _section_of(annotation: Any) -> Any:
    """The model class inside ``Section`` or ``list[Section]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _section_of(arg)
        if found is not None:
            return found
    return None
