"""The whole check of one repository: each model's config on its own, against the files in its version
folders and against the models its ensemble steps name, and the release notes of the Triton that will
serve it. Exported files are checked once per distinct file and tensor contract, so the clones of a
derived or benchmark repository cost nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from tritonrepo.configs import ModelEntry, format_config, model_folders, read_model
from tritonrepo.contract import config as rules
from tritonrepo.contract.ensembles import check_ensemble
from tritonrepo.contract.finding import Finding, error, warning
from tritonrepo.contract.onnx_file import check_onnx
from tritonrepo.contract.release_notes import notes
from tritonrepo.contract.torchscript_file import check_torchscript
from tritonrepo.errors import RepositoryError
from tritonrepo.files import NATIVE_RUNTIMES, exported_filename

# Platforms Triton r24.10 knows, and the backend each one means (core GetBackendTypeFromPlatform).
PLATFORMS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
    "ensemble": "",
}
PYTHON_MODEL_FILE = "model.py"
# What runs an exported file, by the runtime files.NATIVE_RUNTIMES names.
FILE_CHECKS: dict[str, Callable[[str, ModelConfig, Path], list[Finding]]] = {
    "onnxruntime": check_onnx,
    "torchscript": check_torchscript,
}


@dataclass(kw_only=True)
class Report:
    repository: Path
    models: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)


def check_repository(root: Path, *, triton: str | None = None) -> Report:
    """Every finding of the repository at ``root``, for Triton release ``triton`` (a container tag such as
    24.10-py3; None: no release notes). Raises RepositoryError only when ``root`` is not a folder."""
    report = Report(repository=Path(root))
    entries: dict[str, ModelEntry] = {}
    for folder in model_folders(root):
        try:
            entries[folder.name] = read_model(folder)
        except RepositoryError as e:
            report.findings.append(error(folder.name, "config", str(e), "write a config.pbtxt Triton parses"))
    configs = {name: entry.config for name, entry in entries.items()}
    checked: dict[tuple, list[Finding]] = {}
    for name, entry in entries.items():
        report.models.append(name)
        report.findings += model_findings(entry, configs, checked)
    report.findings += notes(triton)
    return report


def model_findings(
    entry: ModelEntry, configs: dict[str, ModelConfig], checked: dict[tuple, list[Finding]]
) -> list[Finding]:
    """One model's findings; ``checked`` keeps each exported file's, by file and contract."""
    name, config = entry.name, entry.config
    ensemble = config.platform == "ensemble"
    found = platform(name, config) + rules.io_dims(name, config) + rules.preferred_batch_sizes(name, config)
    found += rules.queue_instances(name, config)
    found += rules.batch_inputs(name, config) + rules.ragged_inputs(name, config, ensemble=ensemble)
    found += rules.warmups(name, config, entry.path, ensemble=ensemble)
    if ensemble:
        found += check_ensemble(name, config, configs)
    return found + files(entry, checked)


def platform(name: str, config: ModelConfig) -> list[Finding]:
    """A platform Triton knows, consistent with the backend (server #3650), or a backend."""
    if config.platform and config.platform not in PLATFORMS:
        backend = "python" if config.platform == "python" else config.platform
        return [
            error(
                name,
                "platform",
                f"platform {config.platform!r} is none of Triton's {sorted(PLATFORMS)}",
                f'set backend: "{backend}" instead (platform names a framework format, backend a backend)',
            )
        ]
    if config.platform and config.backend and PLATFORMS[config.platform] not in ("", config.backend):
        return [
            error(
                name,
                "platform",
                f"platform {config.platform!r} and backend {config.backend!r} disagree",
                f'set backend: "{PLATFORMS[config.platform]}" or drop one of them',
            )
        ]
    if not config.platform and not config.backend:
        return [error(name, "platform", "no platform or backend is set", 'set backend (e.g. "onnxruntime")')]
    return []


def served_file(config: ModelConfig) -> tuple[str, str] | None:
    """(runtime, file name) of the exported file a model runs: a native one's, or a derived Python-backend
    model's (the ``runtime`` and ``model_filename`` parameters the derivation writes); else None."""
    filename = exported_filename(config)
    if filename is not None:
        return NATIVE_RUNTIMES[config.platform or config.backend][0], filename
    runtime = config.parameters["runtime"].string_value if "runtime" in config.parameters else ""
    if runtime in FILE_CHECKS and "model_filename" in config.parameters:
        return runtime, config.parameters["model_filename"].string_value
    return None


def files(entry: ModelEntry, checked: dict[tuple, list[Finding]]) -> list[Finding]:
    """The version folders hold the file the model loads; an exported one is checked against the config."""
    name, config = entry.name, entry.config
    exported = served_file(config)
    versions = entry.version_dirs
    if exported is None:
        return _own_files(name, config, versions)
    runtime, filename = exported
    missing = [f"{v.name}/{filename}" for v in versions if not (v / filename).is_file()] or (
        [] if versions else [f"1/{filename}"]
    )
    found = [
        warning(
            name,
            "not-exported",
            f"{name}/{path} is not exported yet",
            "run python -m export (or place the exported file there)",
        )
        for path in missing
    ]
    for version in versions:
        path = version / filename
        if path.is_file():
            found += _file(name, config, runtime, path, checked)
    return found


def _own_files(name: str, config: ModelConfig, versions: list[Path]) -> list[Finding]:
    """A Python or ensemble model (or another backend's) has a version folder, holding its file."""
    if not versions:
        return [
            error(
                name,
                "no-version",
                f"{name}/ has no version folder (server #3687: 'No model version was found')",
                f"create {name}/1/ (empty for an ensemble)",
            )
        ]
    filename = config.default_model_filename or (PYTHON_MODEL_FILE if config.backend == "python" else "")
    return [
        error(
            name,
            "missing-file",
            f"{name}/{v.name}/{filename} does not exist (server #4957: 'failed to stat file')",
            f"put {filename} in {name}/{v.name}/ or set default_model_filename to the file that is there",
        )
        for v in versions
        if filename and not (v / filename).exists()
    ]


def _file(
    name: str, config: ModelConfig, runtime: str, path: Path, checked: dict[tuple, list[Finding]]
) -> list[Finding]:
    stat = path.stat()
    contract = ModelConfig(max_batch_size=config.max_batch_size)
    contract.input.extend(config.input)
    contract.output.extend(config.output)
    contract.batch_input.extend(config.batch_input)
    key = (runtime, stat.st_size, stat.st_mtime_ns, format_config(contract))
    if key not in checked:
        checked[key] = FILE_CHECKS[runtime](name, config, path)
    return [replace(f, model=name) for f in checked[key]]
