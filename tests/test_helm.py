"""fleet's Helm charts (deploy/helm) with the pinned helm: they lint, their defaults render
exactly the kustomize bases of deploy/ (so the RBAC that deploy/permissions reviews is the
chart's too), every value takes effect, and bad values fail with a message naming the field.
No cluster: ``helm lint`` and ``helm template`` only (about 0.1 s a render).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import charts
from e2e.charts import AGENT_CHART, HUB_CHART, render
from fleet import deploy, helm, onboarding
from fleet.cli.main import main
from fleet.helm import agent_values

RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def container(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    workload: dict[str, Any] = by_kind(docs, kind)[0]
    first: dict[str, Any] = workload["spec"]["template"]["spec"]["containers"][0]
    return first


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


@pytest.mark.parametrize("chart", [HUB_CHART, AGENT_CHART], ids=lambda c: c.name)
def test_the_chart_lints_clean(chart: Path) -> None:
    done = charts.helm("lint", str(chart), "--strict", "--namespace", deploy.NAMESPACE,
                       "--set", "cluster=member1" if chart == AGENT_CHART else "replicas=2")
    assert "0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize(("part", "chart", "sets"), [
    ("hub", HUB_CHART, []),
    # The agent's one required value; deploy/agent holds a placeholder there.
    ("agent", AGENT_CHART, ["cluster=member1"]),
])
def test_default_values_render_exactly_the_shipped_manifests(
        part: str, chart: Path, sets: list[str]) -> None:
    rendered = {charts.key(d): charts.without_helm_labels(d) for d in render(chart, sets)}
    shipped = {charts.key(d): d for d in charts.shipped(part)}
    # The release's namespace is Helm's (--create-namespace), not the chart's.
    release_namespace = shipped.pop(("Namespace", "", deploy.NAMESPACE))
    assert release_namespace
    if part == "agent":
        shipped[("ConfigMap", deploy.NAMESPACE, deploy.AGENT_CONFIG)]["data"]["cluster"] = \
            "member1"
    assert sorted(rendered) == sorted(shipped)
    for key, body in shipped.items():
        assert rendered[key] == body, f"{key} differs from deploy/{part}"


def test_every_object_carries_helms_labels_and_the_selectors_stay_the_shipped_ones() -> None:
    for doc in render(HUB_CHART):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == "fleet-hub-0.1.0"
    deployment = by_kind(render(HUB_CHART), "Deployment")[0]
    assert deployment["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name":
                                                                 "fleet-hub"}


def test_hub_values_take_effect() -> None:
    docs = render(HUB_CHART, [
        "image.repository=registry.example/fleet", "image.tag=0.2.0",
        "image.pullPolicy=Always", "replicas=3", "resources.limits.cpu=4",
        "metrics.port=9090", "metrics.address=127.0.0.1", "health.port=9091",
        "webhook.port=8443", "leaderElection.leaseSeconds=20", "logLevel=debug",
        "dashboard.port=9095",
        "nodeSelector.pool=system", "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists", "extraArgs[0]=--fit-mode=Summed",
        "podDisruptionBudget.minAvailable=2"])
    deployment = by_kind(docs, "Deployment")[0]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    hub = container(docs, "Deployment")
    assert hub["image"] == "registry.example/fleet:0.2.0"
    assert hub["imagePullPolicy"] == "Always"
    assert hub["resources"]["limits"]["cpu"] == 4
    assert hub["args"] == ["--liveness", "http://0.0.0.0:9091/healthz", "--fit-mode=Summed"]
    assert {p["name"]: p["containerPort"] for p in hub["ports"]} == {
        "metrics": 9090, "health": 9091, "webhook": 8443}
    assert env(hub) | {"PYTHONUNBUFFERED": "1"} == {
        "PYTHONUNBUFFERED": "1", "FLEET_METRICS_ADDR": "127.0.0.1", "FLEET_METRICS_PORT": "9090",
        "FLEET_WEBHOOK_PORT": "8443", "FLEET_WEBHOOK_ADDR": "0.0.0.0",
        "FLEET_WEBHOOK_HOST": "fleet-hub.fleet-system.svc", "FLEET_HUB_LEASE_SECONDS": "20",
        "FLEET_LOG_LEVEL": "debug", "FLEET_DASHBOARD_PORT": "9095",
        "FLEET_DASHBOARD_ADDR": "127.0.0.1",
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    assert "FLEET_DASHBOARD_PORT" not in env(container(
        render(HUB_CHART, ["dashboard.enabled=false"]), "Deployment"))
    service = by_kind(docs, "Service")[0]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "webhook": 8443, "metrics": 9090, "health": 9091}
    webhook = by_kind(docs, "ValidatingWebhookConfiguration")[0]["webhooks"][0]
    assert webhook["clientConfig"]["service"]["port"] == 8443
    assert by_kind(docs, "PodDisruptionBudget")[0]["spec"]["minAvailable"] == 2


def test_a_mounted_webhook_certificate_replaces_the_hubs_own() -> None:
    docs = render(HUB_CHART, ["webhook.certificate.mode=secret",
                              "webhook.certificate.secretName=fleet-hub-cert",
                              "webhook.certificate.caBundle=Q0E=",
                              "webhook.annotations.cert-manager\\.io/inject-ca-from=x/y"])
    hub = container(docs, "Deployment")
    assert env(hub)["FLEET_WEBHOOK_CERT"] == "/etc/fleet-webhook/tls.crt"
    assert env(hub)["FLEET_WEBHOOK_KEY"] == "/etc/fleet-webhook/tls.key"
    assert {"name": "webhook-tls", "mountPath": "/etc/fleet-webhook", "readOnly": True} in \
        hub["volumeMounts"]
    volumes = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": "fleet-hub-cert"}} in volumes
    config = by_kind(docs, "ValidatingWebhookConfiguration")[0]
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": "x/y"}


def test_without_the_webhook_nothing_of_it_is_rendered() -> None:
    docs = render(HUB_CHART, ["webhook.enabled=false"])
    assert not by_kind(docs, "ValidatingWebhookConfiguration")
    hub = container(docs, "Deployment")
    assert not any(name.startswith("FLEET_WEBHOOK") for name in env(hub))
    assert [p["name"] for p in by_kind(docs, "Service")[0]["spec"]["ports"]] == [
        "metrics", "health"]


def test_rbac_create_false_leaves_the_rbac_to_the_installer() -> None:
    for chart, sets in ((HUB_CHART, []), (AGENT_CHART, ["cluster=member1"])):
        docs = render(chart, [*sets, "rbac.create=false"])
        assert not {d["kind"] for d in docs} & RBAC_KINDS
        assert by_kind(docs, "ServiceAccount")


def test_agent_values_take_effect_and_join_values_render_its_hub_credentials(
        tmp_path: Path) -> None:
    kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n"
    values = agent_values("gpu-a", kubeconfig, image="registry.example:5000/fleet:0.2.0",
                          node_selector={"fleet.sh/agent": "true"})
    assert values["image"] == {"repository": "registry.example:5000/fleet", "tag": "0.2.0"}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))  # what join gives helm
    sets = ["metrics.port=9100", "leaderElection.leaseSeconds=12", "logLevel=warning",
            "topologyLevels={example.com/block,example.com/rack}"]
    out = charts.helm(*charts.template_args(AGENT_CHART, sets), "--values",
                      str(tmp_path / "values.yaml")).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    secret = by_kind(docs, "Secret")[0]
    assert secret["metadata"]["name"] == deploy.HUB_KUBECONFIG_SECRET
    assert base64.b64decode(secret["data"]["kubeconfig"]).decode() == kubeconfig
    assert by_kind(docs, "ConfigMap")[0]["data"] == {"cluster": "gpu-a"}
    daemonset = by_kind(docs, "DaemonSet")[0]["spec"]["template"]
    assert "fleet.sh/hub-kubeconfig-sha256" in daemonset["metadata"]["annotations"]
    assert daemonset["spec"]["nodeSelector"] == {"fleet.sh/agent": "true"}
    agent = container(docs, "DaemonSet")
    assert agent["image"] == "registry.example:5000/fleet:0.2.0"
    assert agent["args"][agent["args"].index("--metrics-port") + 1] == "9100"
    assert env(agent)["FLEET_AGENT_LEASE_SECONDS"] == "12"
    assert env(agent)["FLEET_LOG_LEVEL"] == "warning"
    assert env(agent)["FLEET_TOPOLOGY_LEVELS"] == "example.com/block,example.com/rack"


@pytest.mark.parametrize(("chart", "sets", "namespace", "message"), [
    (HUB_CHART, ["replicas=-1"], "fleet-system", "replicas"),
    (HUB_CHART, ["replicas=1000"], "fleet-system", "replicas"),
    (HUB_CHART, ["metrics.port=70000"], "fleet-system", "metrics"),
    (HUB_CHART, ["webhook.timeoutSeconds=0"], "fleet-system", "timeoutSeconds"),
    (HUB_CHART, ["leaderElection.leaseSeconds=1"], "fleet-system", "leaseSeconds"),
    (HUB_CHART, ["logLevel=loud"], "fleet-system", "logLevel"),
    (HUB_CHART, ["replica=3"], "fleet-system", "replica"),
    (HUB_CHART, ["webhook.certificate.mode=secret"], "fleet-system",
     "webhook.certificate.secretName"),
    (HUB_CHART, [], "default", "fleet-system"),
    (AGENT_CHART, [], "fleet-system", "cluster"),
    (AGENT_CHART, ["cluster=Not_A_Name"], "fleet-system", "cluster"),
    (AGENT_CHART, [f"cluster={'a' * 51}"], "fleet-system", "cluster"),
    (AGENT_CHART, ["cluster=member1", "health.port=0"], "fleet-system", "health"),
    (AGENT_CHART, ["cluster=member1", "topologyLevels={a,a}"], "fleet-system",
     "topologyLevels"),
    (AGENT_CHART, ["cluster=member1"], "kube-system", "fleet-system"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_value_fails_naming_its_field(chart: Path, sets: list[str], namespace: str,
                                            message: str) -> None:
    done = charts.helm(*charts.template_args(chart, sets, namespace), check=False)
    assert done.returncode != 0, f"{sets} rendered:\n{done.stdout[:500]}"
    assert message in done.stderr, done.stderr
    assert "panic" not in done.stderr


def test_join_with_helm_but_no_helm_says_so_in_one_line_before_touching_the_hub(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({  # an API server nobody answers on
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    code = main(["join", "m1", "--member-kubeconfig", str(kubeconfig), "--kubeconfig",
                 str(kubeconfig), "--helm", "--helm-binary", str(tmp_path / "no-helm")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1, err
    assert err.startswith("error: helm not found"), err
    assert "--helm-binary" in err
    code = main(["unjoin", "m1", "--member-kubeconfig", str(kubeconfig), "--kubeconfig",
                 str(kubeconfig), "--helm", "--helm-binary", str(tmp_path / "no-helm")])
    assert code == 1
    assert capsys.readouterr().err.startswith("error: helm not found")


def test_join_with_helm_finds_the_pinned_helm_through_fleet_helm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_HELM", charts.helm_binary())
    assert helm.binary() == charts.helm_binary()
    assert helm.chart_path(None, helm.AGENT_CHART) == str(AGENT_CHART)
    with pytest.raises(helm.HelmError, match="--helm-chart"):
        helm.chart_path(None, AGENT_CHART.parent / "no-such-chart")


def test_join_points_the_agent_at_the_hub_server_its_pods_reach(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "hub",
                           "clusters": [{"name": "hub", "cluster": {
                               "server": "https://127.0.0.1:6443",
                               "certificate-authority-data": "Q0E="}}],
                           "users": [{"name": "a", "user": {"token": "t"}}],
                           "contexts": [{"name": "hub", "context": {"cluster": "hub",
                                                                    "user": "a"}}]})
    moved = yaml.safe_load(onboarding.with_server(text, "https://hub.example:6443"))
    assert moved["clusters"][0]["cluster"] == {"server": "https://hub.example:6443",
                                               "certificate-authority-data": "Q0E="}
    assert moved["users"] == [{"name": "a", "user": {"token": "t"}}]
    config = tmp_path / "config"
    config.write_text(text)
    code = main(["join", "m1", "--member-kubeconfig", str(config), "--kubeconfig", str(config),
                 "--hub-server", "hub.example:6443"])
    assert code == 1
    assert capsys.readouterr().err.startswith("error: --hub-server: expected an https:// URL")


@pytest.mark.parametrize(("chart", "sets", "monitor", "shipped"), [
    (HUB_CHART, [], "serviceMonitor", "hub-servicemonitor.yaml"),
    (AGENT_CHART, ["cluster=member1"], "podMonitor", "agent-podmonitor.yaml"),
], ids=["hub", "agent"])
def test_the_prometheus_monitors_are_deploy_monitorings(chart: Path, sets: list[str],
                                                         monitor: str, shipped: str) -> None:
    expected = yaml.safe_load((charts.REPO / "deploy" / "monitoring" / shipped).read_text())
    sets = [*sets, f"metrics.{monitor}.enabled=true"]
    monitors = [charts.without_helm_labels(d) for d in render(chart, sets)
                if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert monitors == [expected]
    labelled = render(chart, [*sets, f"metrics.{monitor}.labels.release=prom"])
    assert [d["metadata"]["labels"]["release"] for d in labelled
            if d["apiVersion"].startswith("monitoring.coreos.com/")] == ["prom"]


def test_helm_gets_the_credentials_in_a_private_values_file_and_its_error_in_one_line(
        tmp_path: Path) -> None:
    """A stand-in helm records its arguments and the values file, then fails as helm does."""
    fake = tmp_path / "helm"
    fake.write_text("#!/bin/sh\n"
                    f'echo "$@" > {tmp_path}/argv\n'
                    'while [ "$1" != "--values" ]; do shift; done\n'
                    f'stat -c %a "$2" > {tmp_path}/mode; cp "$2" {tmp_path}/values\n'
                    'echo "coalesce.go:1: warning" >&2\n'
                    'echo "Error: INSTALLATION FAILED: boom" >&2\nexit 1\n')
    fake.chmod(0o755)
    values = agent_values("m1", "token: secret-token\n")
    with pytest.raises(helm.HelmError) as failed:
        helm.upgrade_install(str(fake), tmp_path / "member.kubeconfig", helm.AGENT_RELEASE,
                             str(AGENT_CHART), values)
    assert str(failed.value) == ("helm upgrade --install fleet-agent: "
                                 "Error: INSTALLATION FAILED: boom")
    argv = (tmp_path / "argv").read_text()
    assert "secret-token" not in argv
    assert "--namespace fleet-system --create-namespace" in argv
    assert (tmp_path / "mode").read_text().strip() == "600"
    assert yaml.safe_load((tmp_path / "values").read_text()) == values
