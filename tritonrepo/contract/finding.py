"""One finding of the repository check: the model, what is wrong with its values, and the fix.

An ``error`` is what NVIDIA's container would refuse at load (or fail on at the first request); a
``warning`` is served but not as meant, or not yet servable (a file not exported yet); a ``note`` is a
fact of the Triton release to deploy that changes behaviour. Only errors fail the check.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonrepo.choices import check_choice

SEVERITIES = ("error", "warning", "note")
# Where a finding is about the repository or the Triton release rather than one model.
REPOSITORY_WIDE = "(repository)"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """``code`` names the defect class (``onnx-dims``, ``ensemble-datatype``, ...) for tests and grep."""

    severity: str
    model: str
    code: str
    problem: str
    fix: str

    def __post_init__(self) -> None:
        check_choice("severity", self.severity, SEVERITIES)

    def line(self) -> str:
        return f"{self.severity}: {self.model}: {self.problem}; fix: {self.fix} [{self.code}]"


def error(model: str, code: str, problem: str, fix: str) -> Finding:
    return Finding(severity="error", model=model, code=code, problem=problem, fix=fix)


def warning(model: str, code: str, problem: str, fix: str) -> Finding:
    return Finding(severity="warning", model=model, code=code, problem=problem, fix=fix)


def dims_text(dims) -> str:
    """Dims as a config.pbtxt writes them: [3, 224, 224], -1 for any size."""
    return "[" + ", ".join(str(int(d)) for d in dims) + "]"
