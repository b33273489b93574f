"""The Helm chart with a real helm binary: lint, render, validate against Kubernetes
schemas, and reject bad values. helm comes from scripts/install-tools."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from controller.config import load_config

ROOT = Path(__file__).parents[2]
CHART = ROOT / "helm" / "ballast"
VALUES = Path(__file__).parent / "values"
HELM = ROOT / ".tools" / "bin" / "helm"
K8S_VERSION = "1.31"
GOOD = [
    None, "servicemonitor.yaml", "full.yaml", "ha.yaml", "lag-job.yaml", "runbooks.yaml",
    "keda.yaml", "keda-ha.yaml", "unsigned.yaml", "kafka-presence.yaml",
]  # fmt: skip
BAD = {
    "bad-replicas.yaml": "replicaCount",
    "bad-group.yaml": "groups",
    "bad-inline-secret.yaml": "kafkaPassword",
    "bad-secret-env.yaml": "secretEnv",
    "bad-lag-job.yaml": "checkpoint",
    "bad-runbook-url.yaml": "runbookBaseUrl",
    "bad-keda-ha.yaml": "replicaCount",
    "bad-keda-prometheus.yaml": "prometheusAddress",
}
#: KEDA's CRD schemas, as the npm package @kubernetes-models/keda generates them from
#: KEDA's release manifests (scripts/install-tools).
KEDA_MODELS = ROOT / ".tools" / "keda-models"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    if not HELM.exists():
        pytest.fail(f"{HELM} is missing: run scripts/install-tools")
    return subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=120, check=False
    )


def values_args(name: str | None) -> list[str]:
    """The values file over ``signed.yaml`` (a signing Secret: the chart's defaults alone
    are refused, test_the_defaults_refuse_to_install_unsigned)."""
    signed = ["-f", str(VALUES / "signed.yaml")]
    return signed if name is None else [*signed, "-f", str(VALUES / name)]


def render(name: str | None) -> list[dict[str, Any]]:
    result = helm("template", "rel", str(CHART), "--namespace", "ballast", *values_args(name))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize("name", GOOD)
def test_lint_strict(name: str | None) -> None:
    result = helm("lint", "--strict", str(CHART), *values_args(name))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", GOOD)
def test_rendered_manifests_are_valid_kubernetes(name: str | None) -> None:
    docs = render(name)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ConfigMap", "ServiceAccount", "PodDisruptionBudget"} <= kinds
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            assert doc["spec"], doc  # CRDs: no upstream schema bundled; structure checked below
            continue
        if doc["apiVersion"].startswith("keda.sh/"):
            continue  # KEDA's own schema: test_scaled_objects_are_valid_for_keda
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        labels = doc["metadata"]["labels"]
        for key in (
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
        ):
            assert key in labels, (doc["kind"], key)


@pytest.mark.parametrize("name", GOOD)
def test_rendered_config_is_a_valid_daemon_config(name: str | None, tmp_path: Path) -> None:
    cm = next(d for d in render(name) if d["kind"] == "ConfigMap" and "ballast.yaml" in d["data"])
    path = tmp_path / "ballast.yaml"
    path.write_text(cm["data"]["ballast.yaml"])
    deployment = next(d for d in render(name) if d["kind"] == "Deployment")
    # Secrets arrive as environment variables (secretEnv): stand-ins for their values.
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    secrets = {e["name"]: "from-a-secret" for e in env if "secretKeyRef" in e.get("valueFrom", {})}
    cfg = load_config(path, environ=secrets)
    port = deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert port == cfg.http.port


def test_the_signing_key_is_mounted_from_its_secret_when_set() -> None:
    assert "BALLAST_SIGNING" not in str(render("unsigned.yaml"))
    pod = next(d for d in render("full.yaml") if d["kind"] == "Deployment")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = env["BALLAST_SIGNING__PRIVATE_KEY_FILE"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "signing")
    assert path.startswith(mount["mountPath"] + "/")
    assert mount["readOnly"] is True
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "signing")
    assert volume["secret"]["secretName"] == "ballast-signing"
    assert volume["secret"]["items"] == [{"key": "signing.key", "path": "signing.key"}]


def test_the_defaults_refuse_to_install_unsigned() -> None:
    """Secure by default: no signing Secret is an install error naming the value to set
    (and the way out, named as unsigned operation), not a chart that forges can beat."""
    result = helm("template", "rel", str(CHART))  # what install renders (lint only notes it)
    assert result.returncode != 0
    assert "signing.secretName is not set" in result.stderr
    assert "config.signing.required=false" in result.stderr


def _secrets(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}


def test_credentials_not_given_are_generated_and_kept() -> None:
    """The MQTT password and the admin token: generated on install when no Secret is
    named (kept across upgrades and uninstalls), mounted and read from there."""
    docs = render(None)
    secrets = _secrets(docs)
    assert set(secrets) == {"rel-ballast-mqtt", "rel-ballast-admin"}
    for secret, key in (("rel-ballast-mqtt", "password"), ("rel-ballast-admin", "token")):
        made = secrets[secret]
        assert made["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        value = base64.b64decode(made["data"][key])
        assert len(value) == 40
        assert value.isalnum()
    assert render(None) != docs  # random on each install (helm template looks nothing up)
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    ref = env["BALLAST_MQTT__PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "rel-ballast-mqtt", "key": "password"}
    token = env["BALLAST_HTTP__ADMIN_TOKEN_FILE"]["value"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "admin-token")
    assert token == mount["mountPath"] + "/token"
    volume = next(v for v in pod["volumes"] if v["name"] == "admin-token")
    assert volume["secret"]["secretName"] == "rel-ballast-admin"
    # named Secrets are used as they are, none generated
    given = render("unsigned.yaml")
    assert _secrets(given) == {}
    container = next(d for d in given if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["BALLAST_MQTT__PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "my-mqtt",
        "key": "pw",
    }


def test_member_keys_are_mounted_for_kafka_presence() -> None:
    docs = render("kafka-presence.yaml")
    assert set(_secrets(docs)) == {"rel-ballast-admin"}  # no MQTT user: no MQTT password
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "member-keys")
    assert env["BALLAST_MEMBERSHIP__MEMBER_KEYS_DIR"] == mount["mountPath"]
    assert "BALLAST_MQTT__PASSWORD" not in env
    volume = next(v for v in pod["volumes"] if v["name"] == "member-keys")
    assert volume["secret"]["secretName"] == "ballast-member-keys"


def test_the_network_policy_is_on_and_opens_metrics_apart_from_the_api() -> None:
    docs = render(None)
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    rules = {tuple(p["port"] for p in r["ports"]): r["from"] for r in policy["spec"]["ingress"]}
    assert rules[("metrics",)] == [{"namespaceSelector": {}}]
    assert rules[("http",)] == [{"podSelector": {}}]  # the API: the release's namespace
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 8080,
        "metrics": 9090,
    }
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == "metrics"
    monitor = next(d for d in render("servicemonitor.yaml") if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_restricted_pod_security_and_probes() -> None:
    deployment = next(d for d in render("full.yaml") if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    replica, secret = container["env"][0], container["env"][1]
    assert replica["valueFrom"]["fieldRef"] == {"fieldPath": "metadata.name"}
    assert secret["valueFrom"]["secretKeyRef"] == {"name": "ballast-mqtt", "key": "password"}
    # inline values are paths to mounted Secrets, never secrets
    assert all(
        e.get("value", "/var/run/secrets/").startswith("/var/run/secrets/")
        for e in container["env"]
    )
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_ha_runs_several_replicas_with_rolling_updates() -> None:
    deployment = next(d for d in render("ha.yaml") if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate"}


def test_monitoring_objects_carry_release_labels_and_packaged_files() -> None:
    docs = {d["kind"]: d for d in render("servicemonitor.yaml")}
    assert docs["ServiceMonitor"]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = docs["PrometheusRule"]["spec"]["groups"][0]["rules"]
    shipped = yaml.safe_load((ROOT / "config" / "prometheus" / "ballast-rules.yaml").read_text())
    assert rules == shipped["groups"][0]["rules"]
    dashboard_cm = next(d for d in render(None) if d["metadata"]["name"].endswith("-dashboard"))
    assert dashboard_cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped_dashboard = (ROOT / "config" / "grafana" / "ballast.json").read_text()
    assert dashboard_cm["data"]["ballast.json"].strip() == shipped_dashboard.strip()


def test_every_alert_links_its_runbook_where_the_docs_are_served() -> None:
    rule = next(d for d in render("runbooks.yaml") if d["kind"] == "PrometheusRule")
    links = {
        r["alert"]: r["annotations"]["runbook_url"] for r in rule["spec"]["groups"][0]["rules"]
    }
    base = "https://docs.example.com/ballast/runbooks.html#"
    assert links == {alert: base + alert.lower() for alert in links}


@pytest.mark.parametrize(("name", "mentions"), sorted(BAD.items()))
def test_bad_values_are_rejected_with_a_clear_message(name: str, mentions: str) -> None:
    for command in (["lint", "--strict"], ["template", "rel"]):
        result = helm(*command, str(CHART), *values_args(name))
        assert result.returncode != 0, f"{command} accepted {name}"
        assert "values don't meet the specifications of the schema" in result.stdout + result.stderr
        assert mentions in result.stdout + result.stderr


def test_lag_job_is_off_by_default() -> None:
    assert not [d for d in render(None) if "lag-job" in d["metadata"]["name"]]


def test_lag_job_submits_in_cluster_mode_with_the_controllers_settings() -> None:
    """spark-submit in cluster mode against this cluster; the driver runs as the job's
    account, mounts the controller's ballast.yaml through its pod template (validated as
    a Pod), gets the Kafka password from the Secret, and checkpoints to object storage."""
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render("lag-job.yaml")}
    job = docs[("Job", "rel-ballast-lag-job")]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["/opt/spark/bin/spark-submit"]
    args = container["args"]
    flags = dict(zip(args[:-5:2], args[1:-5:2], strict=True))
    assert flags["--master"] == "k8s://https://kubernetes.default.svc"
    assert flags["--deploy-mode"] == "cluster"
    assert flags["--packages"] == (
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0,org.apache.hadoop:hadoop-aws:3.5.0"
    )
    confs = dict(a.split("=", 1) for flag, a in itertools.pairwise(args[:-4]) if flag == "--conf")
    assert confs["spark.kubernetes.namespace"] == "ballast"
    assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == "rel-ballast-lag-job"
    assert confs["spark.kubernetes.container.image"] == "ghcr.io/ballast/ballast-spark:0.1.0"
    assert confs["spark.kubernetes.driver.podTemplateFile"] == "/etc/ballast-lag-job/driver.yaml"
    assert confs["spark.kubernetes.driver.secretKeyRef.BALLAST_KAFKA__SASL_PASSWORD"] == (
        "ballast-kafka:password"
    )
    assert confs["spark.executor.instances"] == "4"
    assert confs["spark.sql.shuffle.partitions"] == "8"
    assert confs["spark.hadoop.fs.s3a.endpoint"] == "http://minio.storage:9000"
    assert args[-5:] == [
        "local:///opt/ballast/lagjob.py",
        "--config",
        "/etc/ballast/ballast.yaml",
        "--checkpoint",
        "s3a://lag-checkpoints/orders",
    ]
    assert pod["serviceAccountName"] == "rel-ballast-lag-job"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # No secret value anywhere in the rendered objects but the Secrets the chart makes.
    shown = [d for d in docs.values() if d["kind"] != "Secret"]
    assert "password:" not in yaml.safe_dump(shown).replace("key: password", "")

    template = yaml.safe_load(
        docs[("ConfigMap", "rel-ballast-lag-job-pod-template")]["data"]["driver.yaml"]
    )
    kubernetes_validate.validate(template, K8S_VERSION, strict=True)
    (volume,) = template["spec"]["volumes"]
    assert volume["configMap"]["name"] == "rel-ballast"  # the controller's own config
    mount = template["spec"]["containers"][0]["volumeMounts"][0]
    assert mount["mountPath"] == "/etc/ballast"

    role = docs[("Role", "rel-ballast-lag-job")]
    assert set(role["rules"][0]["resources"]) >= {"pods", "services", "configmaps"}
    binding = docs[("RoleBinding", "rel-ballast-lag-job")]
    assert binding["subjects"][0] == {
        "kind": "ServiceAccount", "name": "rel-ballast-lag-job", "namespace": "ballast",
    }  # fmt: skip


def test_helm_binary_is_real() -> None:
    assert shutil.which(str(HELM))
    assert helm("version", "--short").stdout.startswith("v3.")


def _keda_refusals(docs: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    """What KEDA's ScaledObject schema says of each document ("" when valid)."""
    if not (KEDA_MODELS / "node_modules" / "@kubernetes-models" / "keda").exists():
        pytest.fail(f"{KEDA_MODELS} is missing: run scripts/install-tools")
    (tmp_path / "docs.json").write_text(json.dumps(docs))
    script = (
        "const { ScaledObject } = require('@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject');"
        "const docs = require(process.argv[1]);"
        "console.log(JSON.stringify(docs.map(d => {"
        "  try { new ScaledObject(d).validate(); return ''; } catch (e) { return e.message; }"
        "})));"
    )
    done = subprocess.run(
        ["node", "-e", script, str(tmp_path / "docs.json")],
        cwd=KEDA_MODELS, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    refusals: list[str] = json.loads(done.stdout)
    return refusals


def test_scaled_objects_are_valid_for_keda_and_reach_the_scaler(tmp_path: Path) -> None:
    docs = render("keda.yaml")
    scaled = [d for d in docs if d["kind"] == "ScaledObject"]
    assert len(scaled) == 3
    assert _keda_refusals(scaled, tmp_path) == ["", "", ""]
    broken = json.loads(json.dumps(scaled[0]))
    broken["spec"]["minReplicaCount"] = "one"
    del broken["spec"]["triggers"][0]["type"]
    assert "minReplicaCount must be integer" in _keda_refusals([broken], tmp_path)[0]
    service = next(d for d in docs if d["kind"] == "Service")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    address = f"{service['metadata']['name']}.ballast.svc:{ports['keda']}"
    external = [s for s in scaled if s["spec"]["triggers"][0]["type"].startswith("external")]
    assert [s["spec"]["triggers"][0]["metadata"] for s in external] == [
        {"scalerAddress": address, "group": "orders-fleet"},
        {"scalerAddress": address, "group": "payments_fleet.eu"},
    ]
    assert [s["metadata"]["namespace"] for s in scaled] == ["orders", "ballast", "ballast"]
    prometheus = scaled[2]["spec"]["triggers"][0]
    assert prometheus["metadata"]["query"] == 'max(ballast_desired_members{group="orders-fleet"})'
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "keda", "containerPort": 6000, "protocol": "TCP"} in container["ports"]
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert any(
        rule["ports"] == [{"port": "keda", "protocol": "TCP"}] for rule in policy["spec"]["ingress"]
    )


def test_with_ha_scaled_objects_read_prometheus(tmp_path: Path) -> None:
    docs = render("keda-ha.yaml")
    scaled = [d for d in docs if d["kind"] == "ScaledObject"]
    assert [s["spec"]["triggers"][0]["type"] for s in scaled] == ["prometheus"]
    assert _keda_refusals(scaled, tmp_path) == [""]
    assert all(
        p["name"] != "keda" for d in docs if d["kind"] == "Service" for p in d["spec"]["ports"]
    )
