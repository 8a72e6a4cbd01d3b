"""An image classifier's scaffold (export/scaffold/cli.py): its input size, its class count, read from its
weights, and with ``--labels`` a post-processing model of its own that names its classes.

The class count is the rows of the weights' classifier head (export/efficientnet_lite/network.py's
``class_count``); the description's native outputs say it. Without labels the new ensemble shares the
template's post-processing model (image_postprocess, ImageNet's labels), so the weights must have as many
classes as it takes. With labels (one per line, line index = class id, as many as the head's rows) the
new model gets ``NAME_postprocess``: the template's entry of its ``configs.python_models``, renamed, taking
logits of the weights' classes, ranking the top min(template's top_k, classes), and reading its own copy
of the labels file beside its linked model.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from export.common import ExportError
from export.efficientnet_lite.kind import weights_class_count
from export.efficientnet_lite.network import HEAD

LABELS_FILE = "labels.txt"  # the labels' copy in the post-processing model's version folder
SUFFIX = "postprocess"  # the post-processing model of its own: NAME_postprocess


def size_configs(
    configs: dict[str, Any],
    template: dict[str, Any],
    *,
    image_size_px: int,
    weights: Path,
    labels: Path | None,
    postprocess: tuple[str, str],
) -> None:
    """Size the new description's ``configs`` (renamed from the template's section ``template``): a
    square input of ``image_size_px`` (its shorter side resized to size + 32 before the centre crop, as
    Google's EfficientNet evaluation does) and the class count of ``weights``. ``postprocess``: the
    template's post-processing model and the new model's own ("" without labels, when it shares it)."""
    native = configs["native"]
    native["inputs"] = [{**native["inputs"][0], "dims": [3, image_size_px, image_size_px]}]
    configs["image_preprocessing"]["resize_shorter_px"] = image_size_px + 32
    classes = weights_class_count(weights)
    native["outputs"] = [{**native["outputs"][0], "dims": [classes]}]
    shared, own = postprocess
    (taken,) = _entry(template, shared)["inputs"][0]["dims"]  # the classes of the template's labels
    if labels is None:
        if classes != taken:
            raise ExportError(
                f"the weights' classifier head ({HEAD}) has {classes} classes, but {shared}, which the "
                f"ensemble would share, takes {taken} (ImageNet's); give your classes' labels with "
                "--labels LABELS.txt, one per line, line index = class id"
            )
        return
    count = len(read_labels(labels))
    if count != classes:
        raise ExportError(
            f"--labels {labels} has {count} labels, but the weights' classifier head ({HEAD}) has "
            f"{classes} classes; write one label per class, one per line, line index = class id"
        )
    configs["python_models"] = [
        _own_entry(entry, classes=classes) if entry["model"] == own else entry
        for entry in configs["python_models"]
    ]


def read_labels(path: Path) -> list[str]:
    """The labels of ``path``, one per line, as the post-processing model reads them; ExportError naming
    a blank or repeated one."""
    try:
        labels = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ExportError(
            f"--labels {path}: cannot read it ({e}); give a UTF-8 text file, a label a line"
        ) from e
    blank = [number for number, label in enumerate(labels, start=1) if not label.strip()]
    if blank:
        raise ExportError(f"--labels {path}: line(s) {blank} are blank; write one label per line, no gaps")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ExportError(f"--labels {path}: {repeated} appear more than once; give each class its own label")
    return labels


def _entry(template: dict[str, Any], model: str) -> dict[str, Any]:
    """The template's ``configs.python_models`` entry of its post-processing model ``model``."""
    entries = [entry for entry in template.get("python_models", []) if entry.get("model") == model]
    if len(entries) != 1:
        raise ExportError(
            f"the template's configs.python_models states no {model!r}, the post-processing model its "
            "ensemble ends with; restore the template's description"
        )
    return entries[0]


def _own_entry(entry: dict[str, Any], *, classes: int) -> dict[str, Any]:
    """A renamed post-processing entry for ``classes``: logits [classes], the top min(top_k, classes) of
    them in each output, and the labels file beside it."""
    k = min(int(entry["parameters"]["top_k"]), classes)
    return {
        **entry,
        "about": f"{entry['about']}, with its own {classes} labels (1/{LABELS_FILE})",
        "inputs": [{**entry["inputs"][0], "dims": [classes]}],
        "outputs": [{**output, "dims": [k]} for output in entry["outputs"]],
        "parameters": {**entry["parameters"], "top_k": str(k), "labels_file": LABELS_FILE},
    }
