"""docker-compose.yml and its CPU override: structure, pinned images, and the compose-spec schema.

docker-compose 1.29.2 (the Python implementation) does not install here: it needs PyYAML<6, which no
longer builds. The files are validated instead against the compose-spec JSON schema that the
check-jsonschema package vendors (no network), after the checks below that the schema cannot make.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml

from tritonrepo.access import ADMIN_HEADER, RESTRICTED_GRPC_PROTOCOLS, RESTRICTED_HTTP_APIS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
CPU_OVERRIDE = ROOT / "docker-compose.cpu.yml"
VERSIONS = ROOT / "deploy" / "versions.env"
REQUIRED_SERVICES = {
    "export", "tritonserver", "proxy", "prometheus", "grafana", "locust-master", "locust-worker"
}  # fmt: skip
# What a deployment sets from its own environment; values here only stand in for the interpolation.
RUNTIME_ENV = {"TRITON_ADMIN_KEY": "test-key", "GRAFANA_ADMIN_PASSWORD": "test-password"}
PROBE_IN_IMAGE = "/opt/tritonserver/model_probe.py"
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class _ComposeLoader(yaml.SafeLoader):
    """YAML loader that understands Compose's merge tags (!reset, !override) by keeping the value."""


for _tag in ("!reset", "!override"):
    _ComposeLoader.add_constructor(_tag, lambda loader, node: _construct_plain(loader, node))


def _construct_plain(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


def read_versions() -> dict[str, str]:
    pairs = {}
    for line in VERSIONS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


def interpolate(value: object, env: dict[str, str]) -> object:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR:?error} over every string of a loaded document."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if env.get(name):
            return env[name]
        if op in (":-", "-"):
            return arg
        raise AssertionError(f"${{{name}}} is unset and required: {arg or 'no message'}")

    return _VARIABLE.sub(substitute, value.replace("$$", "\0")).replace("\0", "$")


@pytest.fixture(scope="module")
def versions() -> dict[str, str]:
    return read_versions()


@pytest.fixture(scope="module")
def raw_compose() -> dict:
    return yaml.load(COMPOSE.read_text(), Loader=_ComposeLoader)


@pytest.fixture(scope="module")
def compose(raw_compose: dict, versions: dict[str, str]) -> dict:
    return interpolate(raw_compose, {**versions, **RUNTIME_ENV})


def compose_schema() -> dict:
    path = resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(path.read_text())


def test_versions_file_pins_the_triton_container_matching_the_local_server(versions: dict[str, str]) -> None:
    assert re.fullmatch(r"\d\d\.\d\d-py3", versions["TRITON_TAG"]), versions["TRITON_TAG"]
    assert versions["TRITON_TAG"] == "24.10-py3", "Triton 2.51 (the nvidia-pytriton 0.7.0 server) is 24.10"


def test_compose_has_every_service_of_the_stack(compose: dict) -> None:
    assert REQUIRED_SERVICES <= set(compose["services"])


@pytest.mark.parametrize("path", [COMPOSE, CPU_OVERRIDE], ids=lambda p: p.name)
def test_compose_files_validate_against_the_compose_spec_schema(path: Path) -> None:
    document = yaml.load(path.read_text(), Loader=_ComposeLoader)
    errors = sorted(jsonschema.Draft202012Validator(compose_schema()).iter_errors(document), key=str)
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def test_the_schema_check_rejects_a_misspelt_key(raw_compose: dict) -> None:
    broken = json.loads(json.dumps(raw_compose))
    broken["services"]["tritonserver"]["healthchek"] = broken["services"]["tritonserver"].pop("healthcheck")
    assert list(jsonschema.Draft202012Validator(compose_schema()).iter_errors(broken))


def test_every_image_is_pinned_by_tag_or_digest(compose: dict) -> None:
    for name, service in compose["services"].items():
        image = service.get("image")
        assert image, f"service {name} names no image"
        reference = image.rsplit("/", 1)[-1]
        assert "@sha256:" in image or ":" in reference, f"{name}: {image} has no tag or digest"
        assert not reference.endswith(":latest"), f"{name}: {image} uses latest"
        if "build" in service:
            assert service.get("pull_policy") == "build", f"{name} is built locally: set pull_policy: build"


def test_the_triton_image_comes_from_the_one_pinned_tag(compose: dict, versions: dict[str, str]) -> None:
    server = compose["services"]["tritonserver"]
    assert server["build"]["args"]["TRITON_IMAGE"] == f"nvcr.io/nvidia/tritonserver:{versions['TRITON_TAG']}"
    assert server["image"].endswith(f":{versions['TRITON_TAG']}")
    dockerfile = (
        ROOT / server["build"]["context"] / server["build"].get("dockerfile", "Dockerfile")
    ).read_text()
    assert re.search(r"^ARG TRITON_IMAGE$", dockerfile, re.M), (
        "the base image must be a build arg without default"
    )
    assert re.search(r"^FROM \$\{TRITON_IMAGE\}$", dockerfile, re.M)
    assert "nvcr.io" not in dockerfile, "the tag lives in deploy/versions.env only"


def test_other_images_come_from_the_versions_file(raw_compose: dict, versions: dict[str, str]) -> None:
    for name in ("proxy", "prometheus", "grafana"):
        variable = raw_compose["services"][name]["image"]
        assert re.fullmatch(r"\$\{\w+_IMAGE:\?[^}]+\}", variable), f"{name}: {variable}"
        assert variable[2:].split(":")[0] in versions
    # The export, bench and Locust images are built on the one pinned Python image.
    for name in ("export", "bench-gpu", "locust-master", "locust-headless", "locust-worker"):
        assert raw_compose["services"][name]["build"]["args"]["PYTHON_IMAGE"].startswith("${PYTHON_IMAGE:?")
    server_args = raw_compose["services"]["tritonserver"]["build"]["args"]
    for name in ("TRITON_PYTHON", "TRITON_GLIBC"):  # what the Triton container is built on
        assert server_args[name] == f"${{{name}:?run docker compose with --env-file deploy/versions.env}}"
        assert name in versions


def test_the_server_waits_for_the_export_and_is_health_checked_per_model(compose: dict) -> None:
    server = compose["services"]["tritonserver"]
    assert server["depends_on"]["export"]["condition"] == "service_completed_successfully"
    assert server["healthcheck"]["test"] == ["CMD", "python3", PROBE_IN_IMAGE]
    dockerfile = (
        ROOT / server["build"]["context"] / server["build"].get("dockerfile", "Dockerfile")
    ).read_text()
    assert f"COPY deploy/tritonserver/model_probe.py {PROBE_IN_IMAGE}" in dockerfile
    assert server["environment"]["TRITON_ADMIN_KEY"] == RUNTIME_ENV["TRITON_ADMIN_KEY"]
    required = server["environment"]["TRITON_REQUIRED_MODELS"].split(",")
    assert required and all((ROOT / "model_repository" / m / "config.pbtxt").is_file() for m in required)
    assert compose["services"]["export"]["restart"] == "no"
    # The export fails only for what the server requires (export/required.py): the same pipelines.
    assert compose["services"]["export"]["environment"]["TRITON_REQUIRED_MODELS"] == ",".join(required)


def test_the_repository_contract_is_checked_in_the_export_image_before_the_server_starts(
    compose: dict, versions: dict[str, str]
) -> None:
    """python -m tritonrepo check runs where the project's code and onnxruntime are (the export image),
    on what the server will mount, after the export and before tritonserver; the server image has neither."""
    services = compose["services"]
    check = services["repository-check"]
    assert check["command"] == ["python", "-m", "tritonrepo", "check", "model_repository"]
    assert (check["image"], check["build"]) == (services["export"]["image"], services["export"]["build"])
    assert check["volumes"] == ["./model_repository:/workspace/model_repository:ro"]
    assert check["depends_on"] == {"export": {"condition": "service_completed_successfully"}}
    assert services["tritonserver"]["depends_on"]["repository-check"] == {
        "condition": "service_completed_successfully"
    }
    text = CPU_OVERRIDE.read_text()
    override = interpolate(yaml.load(text, Loader=_ComposeLoader), {**versions, **RUNTIME_ENV})["services"]
    cpu_check = override["repository-check"]
    assert (
        cpu_check["command"][-1] == "build/cpu_repository"
        and cpu_check["image"] == override["export"]["image"]
    )
    assert cpu_check["build"] == override["export"]["build"], (
        "the CPU image, not the GPU build under its name"
    )
    assert cpu_check["depends_on"] == {"cpu-repository": {"condition": "service_completed_successfully"}}
    assert "./build/cpu_repository:/workspace/build/cpu_repository:ro" in cpu_check["volumes"]


def test_the_export_runs_on_a_reserved_gpu_with_the_cuda_builds_of_the_servers_runtimes(
    compose: dict, versions: dict[str, str]
) -> None:
    export = compose["services"]["export"]
    assert export["command"] == ["python", "-m", "export", "--served-on", "gpu"]
    (device,) = export["deploy"]["resources"]["reservations"]["devices"]
    assert device == compose["services"]["tritonserver"]["deploy"]["resources"]["reservations"]["devices"][0]
    # NVIDIA's 24.10 container serves with onnxruntime 1.19.2 and libtorch 2.5.
    assert versions["EXPORT_ONNXRUNTIME_VERSION"] == "1.19.2"
    assert versions["EXPORT_TORCH_VERSION"].startswith("2.5.")
    args = export["build"]["args"]
    assert (args["TORCH_VERSION"], args["ONNXRUNTIME_VERSION"]) == (
        versions["EXPORT_TORCH_VERSION"],
        versions["EXPORT_ONNXRUNTIME_VERSION"],
    )
    assert "ONNXRUNTIME_PACKAGE" not in args and "TORCH_INDEX_URL" not in args, "the GPU build is the default"
    assert export["build"]["target"] == "export", "the bench target adds the benchmark's environment"
    dockerfile = (ROOT / "deploy" / "export" / "Dockerfile").read_text()
    assert dockerfile.count("ARG ONNXRUNTIME_PACKAGE=onnxruntime-gpu") == 2  # the export and bench stages
    # each requirements install names torch and onnxruntime in the same resolver run: nothing may replace them
    for requirements in ("/tmp/export-requirements.txt", "/tmp/bench-requirements.txt"):
        install = re.search(
            rf"pip install --no-cache-dir --only-binary=:all: -r {requirements}([^&]*)", dockerfile
        )
        assert install and '"torch==$TORCH_VERSION"' in install[1], requirements
        assert '"$ONNXRUNTIME_PACKAGE==$ONNXRUNTIME_VERSION"' in install[1], requirements
    export_stage = dockerfile[: dockerfile.index("FROM export AS bench")]
    assert 'CMD ["python", "-m", "export", "--served-on", "gpu"]' in export_stage
    # torch's CUDA libraries come as wheels under the image's Python; onnxruntime-gpu finds them there.
    python = re.search(r"python:(\d+\.\d+)\.", versions["PYTHON_IMAGE"])
    assert python and f"/usr/local/lib/python{python[1]}/site-packages/nvidia" in dockerfile


def test_no_default_or_built_image_bakes_cpu_variants_into_a_gpu_deployment() -> None:
    dockerfile = (ROOT / "deploy" / "export" / "Dockerfile").read_text()
    assert not re.search(r"^RUN .*-m export", dockerfile, re.M), "exported at build time, with no GPU"
    for path in (COMPOSE, *sorted((ROOT / "deploy").rglob("*.yaml")), ROOT / "deploy/export/Dockerfile"):
        commands = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        for match in re.finditer(r"python.{0,12}-m.{0,6}export\b(?P<rest>[^\n]*)", commands):
            assert "--served-on" in match["rest"] and "gpu" in match["rest"], f"{path.name}: {match[0]}"


def test_the_server_reserves_a_gpu_and_only_the_proxy_publishes_inference_ports(compose: dict) -> None:
    server = compose["services"]["tritonserver"]
    (device,) = server["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert "count" in device or "device_ids" in device
    assert {p.rsplit(":", 1)[-1] for p in server["ports"]} == {"8002"}, "metrics only: clients go via proxy"
    proxy = compose["services"]["proxy"]
    assert {p.rsplit(":", 1)[-1] for p in proxy["ports"]} == {"8000", "8001"}
    assert server["shm_size"]


def test_the_proxy_enforces_the_shared_request_size_limit(compose: dict) -> None:
    proxy = compose["services"]["proxy"]
    assert "./deploy/nginx/limits.conf:/etc/nginx/limits.conf:ro" in proxy["volumes"]
    assert "./deploy/nginx/compose.conf:/etc/nginx/nginx.conf:ro" in proxy["volumes"]
    conf = (ROOT / "deploy" / "nginx" / "compose.conf").read_text()
    assert "include limits.conf;" in conf and "client_max_body_size" not in conf, "one place for the limit"
    assert "server tritonserver:8000;" in conf and "server tritonserver:8001;" in conf
    assert "grpc_pass grpc://triton_grpc;" in conf
    assert re.search(r"^client_max_body_size \d+m;$", (ROOT / "deploy/nginx/limits.conf").read_text(), re.M)
    assert proxy["depends_on"]["tritonserver"]["condition"] == "service_healthy"
    assert compose["services"]["locust-master"]["environment"]["LOCUST_HOST"] == "http://proxy:8000"


def test_one_model_failing_to_load_does_not_stop_the_server(compose: dict) -> None:
    command = compose["services"]["tritonserver"]["command"]
    assert "--exit-on-error=false" in command and "--strict-readiness=false" in command


def test_the_server_command_restricts_admin_apis_with_the_launchers_list(compose: dict) -> None:
    command = compose["services"]["tritonserver"]["command"]
    flags = dict(arg.split("=", 1) for arg in command if arg.startswith("--"))
    assert flags["--model-control-mode"] == "none"
    assert flags["--model-repository"] == "/models"
    assert int(flags["--exit-timeout-secs"]) > 0
    key = RUNTIME_ENV["TRITON_ADMIN_KEY"]
    assert flags["--http-restricted-api"] == f"{','.join(RESTRICTED_HTTP_APIS)}:{ADMIN_HEADER}={key}"
    assert (
        flags["--grpc-restricted-protocol"] == f"{','.join(RESTRICTED_GRPC_PROTOCOLS)}:{ADMIN_HEADER}={key}"
    )
    stop_grace_s = int(compose["services"]["tritonserver"]["stop_grace_period"].rstrip("s"))
    assert int(flags["--exit-timeout-secs"]) < stop_grace_s, "Docker would SIGKILL a draining server"


def test_the_admin_key_has_no_default(raw_compose: dict) -> None:
    command = " ".join(raw_compose["services"]["tritonserver"]["command"])
    assert "${TRITON_ADMIN_KEY:?" in command and "${TRITON_ADMIN_KEY:-" not in command


def test_every_mounted_host_path_exists_except_outputs(compose: dict) -> None:
    outputs = ("./reports", "./build")  # written at run time, with everything under them
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            written = any(source == o or source.startswith(o + "/") for o in outputs)
            if source.startswith(".") and not written:
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
        build = service.get("build")
        if build:
            context = ROOT / build["context"]
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"


def test_every_path_a_dockerfile_copies_exists_in_its_build_context(compose: dict) -> None:
    """A moved file or folder must not break an image build: each COPY/ADD source is in the context."""
    built = {}
    for service in compose["services"].values():
        if "build" in service:
            context = ROOT / service["build"]["context"]
            built[context / service["build"].get("dockerfile", "Dockerfile")] = context
    assert len(built) >= 3  # export, tritonserver, locust
    for dockerfile, context in built.items():
        for line in dockerfile.read_text().splitlines():
            words = line.split()
            if not words or words[0] not in ("COPY", "ADD") or any(w.startswith("--from") for w in words):
                continue
            sources = [w for w in words[1:-1] if not w.startswith("--")]
            for source in sources:
                assert (context / source).exists(), f"{dockerfile.relative_to(ROOT)} copies {source}: missing"


def test_the_locust_image_has_everything_the_locustfile_imports(compose: dict, import_closure) -> None:
    """Every project package the locustfile reaches is mounted, and every distribution it imports is
    installed by deploy/locust/Dockerfile at the version requirements.lock pins (the versions of its
    dependencies: tests/checks/test_deploy_images_resolve.py)."""
    from importlib import metadata

    packages, third_party = import_closure("loadtest.load.locustfile")
    third_party |= {"skimage"}  # the image task's photographs: found with importlib, not imported
    for name in ("locust-master", "locust-headless", "locust-worker"):
        mounted = {volume.split(":")[1] for volume in compose["services"][name]["volumes"]}
        assert {f"/mnt/project/{package}" for package in packages} <= mounted, name
    required = _pins(ROOT / "deploy" / "locust" / "requirements.txt")
    locked = _pins(ROOT / "requirements.lock")
    distributions = metadata.packages_distributions()
    for module in sorted(third_party - set(sys.stdlib_module_names)):
        (distribution,) = {_normalise(d) for d in distributions[module]}
        assert distribution in required, f"{module} ({distribution}) not installed"
    assert "locust" in required
    assert {name: locked[name] for name in required} == required, "pin the versions of requirements.lock"
    dockerfile = (ROOT / "deploy" / "locust" / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["locust"\]$', dockerfile, re.M), "compose passes Locust's arguments only"


def test_the_locust_image_user_can_write_the_mounted_report_folder(compose: dict) -> None:
    """The headless master writes its CSV files into the bind-mounted reports/locust/, which belongs to the
    host user: the image's user gets that uid (LOCUST_UID), and the guide creates the folder first."""
    dockerfile = (ROOT / "deploy" / "locust" / "Dockerfile").read_text()
    assert (
        re.search(r'useradd [^\n]*--uid "\$LOCUST_UID" locust', dockerfile)
        and "\nUSER locust\n" in dockerfile
    )
    assert compose["services"]["locust-master"]["build"]["args"]["LOCUST_UID"] == "1000", "the default uid"
    csv = next(a for a in compose["services"]["locust-headless"]["command"] if a.startswith("--csv="))
    assert csv == "--csv=reports/locust/compose"
    guide = (ROOT / "docs" / "deploy.md").read_text()
    step = guide[guide.index("7. **Put load on it**") : guide.index("8. **Measure batching")]
    assert (
        step.index("mkdir -p reports/locust") < step.index("--profile loadtest up") and "LOCUST_UID" in step
    )


def _pins(path: Path) -> dict[str, str]:
    """A requirements file's pins as normalised name (extras dropped) -> version."""
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    pairs = (line.partition("==") for line in lines if "==" in line)
    return {_normalise(name.split("[")[0]): version for name, _, version in pairs}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_locust_points_at_the_projects_locustfile_in_both_profiles(compose: dict) -> None:
    services = compose["services"]
    for name in ("locust-master", "locust-headless", "locust-worker"):
        assert services[name]["environment"]["LOCUST_LOCUSTFILE"] == "loadtest/load/locustfile.py"
        assert services[name]["profiles"]
    assert "--headless" in services["locust-headless"]["command"]
    assert "--headless" not in services["locust-master"]["command"]
    assert services["locust-worker"]["command"][-1] == "locust-master"
    assert "locust-master" in services["locust-headless"]["networks"]["default"]["aliases"]


def test_the_bench_profile_serves_the_benchmarks_repository_as_the_deployed_server_does(
    compose: dict,
) -> None:
    services = compose["services"]
    assert {name for name, s in services.items() if s.get("profiles") == ["bench"]} == {
        "bench-repository", "tritonserver-bench", "bench-gpu"
    }  # fmt: skip
    server, bench_server = services["tritonserver"], services["tritonserver-bench"]
    same = ("image", "build", "healthcheck", "shm_size", "ulimits", "deploy", "stop_grace_period")
    assert {k: bench_server[k] for k in same} == {k: server[k] for k in same}, "the image and checks"
    # The same command: every restricted API behind the key, the one perf_analyzer sends over HTTP and gRPC.
    assert bench_server["command"] == server["command"]
    assert services["bench-gpu"]["environment"]["TRITON_ADMIN_KEY"] == RUNTIME_ENV["TRITON_ADMIN_KEY"]
    assert bench_server["volumes"] == ["./build/bench_repository:/models:ro"]
    assert not bench_server["ports"], "on the internal network only: bench-gpu reaches it by name"
    assert bench_server["depends_on"] == {"bench-repository": {"condition": "service_completed_successfully"}}
    assert bench_server["environment"]["TRITON_ADMIN_KEY"] == RUNTIME_ENV["TRITON_ADMIN_KEY"]
    writer = services["bench-repository"]
    assert writer["command"] == [
        "python", "-m", "loadtest.bench", "--mode", "gpu", "--write-repository", "build/bench_repository"
    ]  # fmt: skip
    assert writer["depends_on"]["export"]["condition"] == "service_completed_successfully"
    assert ".:/workspace" in writer["volumes"] and writer["build"]["target"] == "bench"
    # The export keeps its records in the checkout, where the writer and the run read them.
    assert "./build/precision:/workspace/build/precision" in services["export"]["volumes"]


def test_the_bench_run_measures_the_bench_server_by_url_after_its_health_check(compose: dict) -> None:
    from loadtest.bench.gpu.plan import GPU, measured_models, served_clones
    from loadtest.bench.gpu.server import server_urls

    bench = compose["services"]["bench-gpu"]
    assert bench["depends_on"] == {"tritonserver-bench": {"condition": "service_healthy"}}
    script = bench["command"][-1]
    assert bench["command"][:2] == ["sh", "-c"]
    assert script.startswith("python -m loadtest.bench.gpu.preflight && exec python -m loadtest.bench ")
    url = re.search(r"--url (\S+)", script)
    assert url and "--mode gpu" in script
    urls = server_urls(url[1])
    assert (urls.http_url, urls.grpc_url) == ("tritonserver-bench:8000", "tritonserver-bench:8001")
    assert bench["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    required = compose["services"]["tritonserver-bench"]["environment"]["TRITON_REQUIRED_MODELS"].split(",")
    _, arms = served_clones(GPU, ROOT / "model_repository", ROOT / "no-records")  # no records: fp32 served
    assert set(required) <= set(measured_models(arms)), "the health check waits for what the run measures"
    assert {"text_embedder", "text_embedder__nobatch"} <= set(required)


def test_the_cpu_override_drops_the_gpu_and_serves_the_cpu_copy(versions: dict[str, str]) -> None:
    text = CPU_OVERRIDE.read_text()
    override = interpolate(yaml.load(text, Loader=_ComposeLoader), {**versions, **RUNTIME_ENV})
    assert re.search(r"devices: !reset \[\]", text), "the GPU reservation must be reset, not merged"
    server = override["services"]["tritonserver"]
    assert server["volumes"] == ["./build/cpu_repository:/models:ro"]
    assert server["depends_on"]["cpu-repository"]["condition"] == "service_completed_successfully"
    step = override["services"]["cpu-repository"]
    assert step["command"][:4] == ["python", "-m", "tritonrepo", "cpu-copy"]
    assert "--target=build/cpu_repository" in step["command"]
    assert "--cores=0" in step["command"], "0: the cores the step sees, unless TRITON_CPU_CORES says"
    export = override["services"]["export"]
    assert export["command"] == ["python", "-m", "export", "--served-on", "cpu"]
    assert export["build"]["args"]["ONNXRUNTIME_PACKAGE"] == "onnxruntime", "the CPU build, no CUDA wheels"
    assert re.search(r"export:(?:(?!\n  \S).)*devices: !reset \[\]", text, re.S), "no GPU for the export"
    assert export["image"] == step["image"] != "triton-batching/export:local", "never the GPU build's tag"


def test_the_server_image_installs_every_package_the_python_models_import() -> None:
    requirements = ROOT / "deploy" / "tritonserver" / "requirements.txt"
    pins = _pins(requirements)
    assert all(re.fullmatch(r"[\d.]+", v) for v in pins.values()), f"every package pinned with ==: {pins}"
    import_to_package = {"numpy": "numpy", "PIL": "pillow", "tokenizers": "tokenizers"}
    provided = {"triton_python_backend_utils", "__future__"}
    for model_py in sorted((ROOT / "model_repository").glob("*/1/*.py")):
        local = {p.stem for p in model_py.parent.glob("*.py")}
        for module in _third_party_imports(model_py) - provided - local:
            package = import_to_package.get(module)
            assert package in pins, (
                f"{model_py.relative_to(ROOT)} imports {module}; add it to {requirements.name}"
            )


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names}


def test_every_start_period_is_the_measured_load_with_its_margin(compose: dict) -> None:
    """compose's health check, the server image's HEALTHCHECK and the Kubernetes startup probe wait the
    same time, the one docs/measurements.md derives from the full repository's measured load."""
    seconds = int(compose["services"]["tritonserver"]["healthcheck"]["start_period"].removesuffix("s"))
    dockerfile = (ROOT / "deploy" / "tritonserver" / "Dockerfile").read_text()
    assert f"--start-period={seconds}s" in dockerfile
    deployment = yaml.safe_load((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == seconds
    notes = (ROOT / "docs" / "measurements.md").read_text()
    section = notes[notes.index("### The server's start period") :]
    assert f"are {seconds} s: the measured" in section[: section.index("\n### ")]
