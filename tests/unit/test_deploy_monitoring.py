"""Prometheus config and rules, and the Grafana dashboard: they parse, and every PromQL expression names
only metrics that Triton exports or that the rules record. promtool's own check of the config and the
rules is in tests/integration/test_deploy_system_tools.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tritonlocal.monitoring import TRITON_GPU_METRICS, TRITON_MODEL_METRICS, TRITON_SUMMARY_METRICS

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules" / "triton.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "triton.json"
KNOWN_METRICS = TRITON_MODEL_METRICS | TRITON_SUMMARY_METRICS | TRITON_GPU_METRICS | {"up"}
PROMQL_WORDS = {
    "by",
    "without",
    "and",
    "or",
    "unless",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
}


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def metric_names(expr: str) -> set[str]:
    """Series names a PromQL expression selects (functions, keywords, labels and templating removed)."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:$])([a-zA-Z_:][\w:]*)\s*(\()?", text):
        name, is_call = match.group(1), match.group(2)
        if not is_call and name not in PROMQL_WORDS:
            names.add(name)
    return names


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_metric_name_extraction_ignores_functions_labels_and_keywords() -> None:
    expr = (
        'sum by (model) (rate(nv_inference_count{model=~"$model"}[1m])) / (up > 0) and on (x) foo:bar:rate1m'
    )
    assert metric_names(expr) == {"nv_inference_count", "up", "foo:bar:rate1m"}


def test_prometheus_config_scrapes_triton_from_a_file_sd_target_list() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "triton"
    (file_sd,) = job["file_sd_configs"]
    assert file_sd["files"] == ["targets/triton*.json"]
    assert config["rule_files"] == ["rules/*.yml"]
    targets = json.loads((PROMETHEUS / "targets" / "triton.json").read_text())
    assert targets[0]["targets"] == ["tritonserver:8002"], "compose's service name and metrics port"


def test_rules_record_average_batch_size_as_inferences_per_execution() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = {rule.get("record"): rule["expr"] for group in groups for rule in group["rules"]}
    batch = rules["model:nv_inference_batch_size:avg1m"]
    assert metric_names(batch) == {"nv_inference_count", "nv_inference_exec_count"}
    assert batch.index("nv_inference_count") < batch.index("/") < batch.index("nv_inference_exec_count")
    assert 'quantile="0.99"' in rules["model:nv_inference_request_summary_us:p99"]


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_promql_expression_names_metrics_triton_exports_or_rules_record(source: str) -> None:
    expressions = rule_expressions() if source == "rules" else dashboard_expressions()
    allowed = KNOWN_METRICS | recorded_names()
    for expr in expressions:
        unknown = metric_names(expr) - allowed
        assert not unknown, f"{expr!r} uses {unknown}, which Triton does not export and no rule records"


def test_the_dashboard_shows_throughput_batch_size_queue_compute_failures_and_gpu() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = set().union(*(metric_names(e) for e in dashboard_expressions()))
    assert {
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_request_failure",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
    } <= used
    failures = [e for e in dashboard_expressions() if "nv_inference_request_failure" in e]
    assert all("reason" in e for e in failures), "failures are shown by reason"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_dashboard_uses_the_provisioned_datasource() -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (datasource,) = datasources["datasources"]
    assert datasource["url"] == "http://prometheus:9090"
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == datasource["uid"], panel["title"]
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "dashboards.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
