"""The Kubernetes manifests (deploy/k8s) are checked by parsing, as the compose file is.

No cluster runs here: the manifests are held to the same options as ``docker-compose.yml``,
parsed by Locust's own argument parser, and to the wiring Kubernetes would resolve
(Service selector -> master pod, worker ``--master-host`` -> Service, ConfigMap -> mount).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.test_packaging import compose, expand

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"


def documents() -> list[dict]:
    docs: list[dict] = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def one(kind: str, name: str) -> dict:
    found = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name!r} in deploy/k8s, found {len(found)}"
    return found[0]


def container(deployment: dict) -> dict:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def k8s_argv(c: dict) -> list[str]:
    """command + args with $(VAR) replaced from the container's env, as the kubelet does."""
    env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
    return [re.sub(r"\$\(([A-Z_]+)\)", lambda m: env[m.group(1)], a) for a in c["command"] + c["args"]]


def option_names(argv: list[str]) -> set[str]:
    return {a for a in argv if a.startswith("-")}


def locust_parse(argv: list[str]) -> list[str]:
    code = (
        "import sys; from locust import argument_parser as ap; import tokenswarm.locustfile;"
        "o = ap.parse_options(sys.argv[1:]);"
        "print(o.master, o.worker, o.scenario, o.master_host, o.master_bind_host, o.expect_workers)"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv[1:]], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-6:]


def test_every_manifest_is_valid_yaml_with_kind_and_name():
    docs = documents()
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {
        ("Deployment", "tokenswarm-master"), ("Service", "tokenswarm-master"), ("Deployment", "tokenswarm-worker"),
    }
    for d in docs:
        assert d["apiVersion"] in ("apps/v1", "v1")


def test_the_master_passes_the_same_options_as_the_compose_master():
    c = container(one("Deployment", "tokenswarm-master"))
    argv = k8s_argv(c)
    compose_argv = expand(compose()["services"]["master"]["command"])
    assert argv[0] == compose_argv[0] == "locust"
    assert option_names(argv) == option_names(compose_argv)
    assert argv[argv.index("-f") + 1] == compose_argv[compose_argv.index("-f") + 1]
    master, worker, scenario, _, bind_host, expect = locust_parse(argv)
    assert (master, worker, bind_host) == ("True", "False", "0.0.0.0")
    assert int(expect) == one("Deployment", "tokenswarm-worker")["spec"]["replicas"], \
        "the master must expect as many workers as the worker Deployment runs"
    mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["scenario"]
    assert scenario == f"{mount}/scenario.yaml"


def test_the_worker_passes_the_same_options_as_the_compose_worker_and_dials_the_service():
    argv = k8s_argv(container(one("Deployment", "tokenswarm-worker")))
    compose_argv = expand(compose()["services"]["worker"]["command"])
    assert option_names(argv) == option_names(compose_argv)
    master, worker, _, master_host, _, _ = locust_parse(argv)
    assert (master, worker) == ("False", "True")
    assert master_host == one("Service", "tokenswarm-master")["metadata"]["name"]


def test_the_service_reaches_the_master_pod_on_the_master_and_web_ports():
    service = one("Service", "tokenswarm-master")
    master = one("Deployment", "tokenswarm-master")
    pod_labels = master["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert master["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    named = {p["name"]: p["containerPort"] for p in container(master)["ports"]}
    assert {p["port"] for p in service["spec"]["ports"]} == {5557, 8089}
    for p in service["spec"]["ports"]:
        assert named[p["targetPort"]] == p["port"]


def test_the_scenario_configmap_is_generated_from_a_shipped_scenario_and_mounted_by_name():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    (gen,) = kust["configMapGenerator"]
    key, src = gen["files"][0].split("=", 1)
    assert key == "scenario.yaml" and (K8S / src).resolve().is_file()
    assert kust["generatorOptions"]["disableNameSuffixHash"] is True
    volumes = one("Deployment", "tokenswarm-master")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "scenario", "configMap": {"name": gen["name"]}} in volumes
    from tokenswarm.workload.scenario import load_scenario

    load_scenario(str((K8S / src).resolve()))  # the shipped file is a valid scenario


def secret_env(c: dict) -> dict[str, tuple[str, str]]:
    """The container's variables taken from a Secret: name -> (secret, key)."""
    out = {}
    for e in c.get("env", []):
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            out[e["name"]] = (ref["name"], ref["key"])
    return out


def test_the_web_ui_and_the_worker_port_ship_closed_with_secrets_from_one_secret():
    master = container(one("Deployment", "tokenswarm-master"))
    worker = container(one("Deployment", "tokenswarm-worker"))
    assert "--web-login" in k8s_argv(master), "the web UI behind the Service asks for a password"
    m, w = secret_env(master), secret_env(worker)
    assert set(m) == {"TOKENSWARM_WEB_PASSWORD", "TOKENSWARM_WORKER_TOKEN"}
    assert w == {"TOKENSWARM_WORKER_TOKEN": m["TOKENSWARM_WORKER_TOKEN"]}, "workers present the master's token"
    assert not any(e["name"].startswith("TOKENSWARM_") and "value" in e for e in master.get("env", []) + worker.get("env", [])), \
        "no secret value ships in the manifests"
    kust = (K8S / "kustomization.yaml").read_text()
    assert f"kubectl create secret generic {m['TOKENSWARM_WORKER_TOKEN'][0]}" in kust, "the manifests say how to make it"


def test_the_compose_master_asks_for_a_password_and_workers_present_the_token():
    services = compose()["services"]
    assert "--web-login" in expand(services["master"]["command"])
    for name in ("master", "worker"):
        assert ":?" in services[name]["environment"]["TOKENSWARM_WORKER_TOKEN"], "compose refuses to start without it"
    assert ":?" in services["master"]["environment"]["TOKENSWARM_WEB_PASSWORD"]
    for name in ("sim", "master"):
        assert all(p.startswith("127.0.0.1:") for p in services[name]["ports"]), "published on loopback only"
