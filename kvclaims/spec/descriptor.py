"""Runtime descriptors, format `descriptor: 1` (descriptor-format.md), and their fail-closed loader.

A descriptor is curated, anchored evidence about one runtime surface pinned to a version or
commit. The loader accepts a deliberately small YAML: no aliases or anchors (so no alias
bombs), no duplicate keys (PyYAML would silently keep the last), a size cap, UTF-8 only. Every
rejection is a `DescriptorError` naming file, line and field.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from kvclaims.spec._types import FormatVersion, Identifier, NonBlankText, SpecModel, Text, is_blank
from kvclaims.spec.errors import DescriptorError, Problem
from kvclaims.spec.evidence import (
    Adapter,
    Anchor,
    EvidenceItem,
    ForbiddenLowering,
    LoweringRow,
    Observation,
)
from kvclaims.spec.vocabulary import AdapterDepth, ApproximationSignal, ProtectionMode

MAX_DESCRIPTOR_BYTES = 2 * 1024 * 1024
"""Descriptors are a few KB; anything past 2 MiB is refused before it is parsed."""

DESCRIPTOR_SUFFIXES = (".yaml", ".yml")


class Descriptor(SpecModel):
    """What one runtime surface supplies, natively and through adapters, with anchors."""

    descriptor: FormatVersion = Field(description="The format version; always 1.")
    runtime: Identifier = Field(description="The runtime family (tensorrt-llm, sglang, vllm, ...).")
    surface: NonBlankText = Field(description="The exact surface judged, human readable.")
    version: Text = Field("", description="The version pinned; this or `commit` is required.")
    commit: Text = Field("", description="The commit pinned; this or `version` is required.")
    provenance: Text = Field("", description="Where the curated facts come from.")
    approximation_signals: list[ApproximationSignal] = Field(
        [], description="Primitives present that resemble a contract feature; they never supply one."
    )
    forbidden_lowerings: list[ForbiddenLowering] = Field(
        [], description="Mappings that would misrepresent the contract on this runtime."
    )
    native: list[EvidenceItem] = Field(
        [], description="Evidence the unmodified backend supplies (depth none)."
    )
    adapters: list[Adapter] = Field([], description="Code outside the backend that supplies obligations.")
    observations: list[Observation] = Field(
        [], description="Observed behaviour a mode needs besides obligations."
    )
    lowerings: list[LoweringRow] | None = Field(
        None, description="The (mode, depth) rows to judge; absent: every mode at every depth."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Descriptor:
        if is_blank(self.version) and is_blank(self.commit):
            raise ValueError("a descriptor must pin its surface with 'version' or 'commit'")
        if len(set(self.approximation_signals)) != len(self.approximation_signals):
            raise ValueError("approximation_signals lists a signal twice")
        names = [adapter.name for adapter in self.adapters]
        if len(set(names)) != len(names):
            raise ValueError("two adapters share a name")
        for forbidden in self.forbidden_lowerings:
            if forbidden.via not in self.approximation_signals:
                raise ValueError(
                    f"forbidden lowering via {forbidden.via} names a primitive that is not "
                    "in approximation_signals"
                )
        return self

    def rows(self) -> list[LoweringRow]:
        """The rows to evaluate: the listed ones, or every mode at every depth."""
        if self.lowerings is not None:
            return list(self.lowerings)
        return [LoweringRow(mode=m, depth=d) for m in ProtectionMode for d in AdapterDepth]

    def anchors(self) -> Iterator[Anchor]:
        items: Iterable[EvidenceItem | Observation] = [
            *self.native,
            *(item for adapter in self.adapters for item in adapter.evidence),
            *self.observations,
        ]
        for item in items:
            if item.anchor is not None:
                yield item.anchor


def load_descriptor(path: str | Path) -> Descriptor:
    """Read, validate and anchor-check one descriptor file, or raise `DescriptorError`."""
    path = Path(path)
    return _descriptor_from(path, *_read_yaml(path))


def _descriptor_from(path: Path, document: Any, lines: dict[_Path, int]) -> Descriptor:
    try:
        descriptor = Descriptor.model_validate(document)
    except ValidationError as error:
        raise DescriptorError(_validation_problems(path, error, lines)) from None
    for anchor in descriptor.anchors():
        anchor.verify(path.parent)
    return descriptor


def descriptor_paths(targets: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories into the YAML files to read, sorted, or raise `DescriptorError`."""
    return [path for path, _ in _expand(targets)]


def _expand(targets: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Each file with whether it was named directly (True) or found in a directory (False)."""
    found: list[tuple[Path, bool]] = []
    problems: list[Problem] = []
    for target in map(Path, targets):
        if target.is_dir():
            inside = sorted(p for p in target.iterdir() if p.suffix in DESCRIPTOR_SUFFIXES)
            if not inside:
                problems.append(Problem(str(target), "directory contains no .yaml descriptor"))
            found.extend((path, False) for path in inside)
        elif target.exists():
            found.append((target, True))
        else:
            problems.append(Problem(str(target), "no such file or directory"))
    if problems:
        raise DescriptorError(problems)
    return found


NOT_A_DESCRIPTOR = "YAML without a top-level `descriptor:` key, so not a descriptor: skipped"
"""Why a file found in a directory is passed over (a file named directly is always read)."""


def _warn_skipped(path: Path) -> None:
    warnings.warn(f"{path}: {NOT_A_DESCRIPTOR}", stacklevel=3)


def load_descriptors(
    targets: Iterable[str | Path], *, on_skip: Callable[[Path], None] = _warn_skipped
) -> list[tuple[Path, Descriptor]]:
    """Load every descriptor under `targets`; all problems of all files are raised together.

    A YAML file found in a directory whose top level has no `descriptor:` key is some other
    file kept beside the descriptors: it is skipped and handed to `on_skip` (default: a
    warning naming it). Malformed YAML is never skipped (it cannot show what it is), and a
    file named directly is always read as a descriptor. Raises when every file was skipped."""
    loaded: list[tuple[Path, Descriptor]] = []
    problems: list[Problem] = []
    skipped: list[Path] = []
    for path, named in _expand(targets):
        try:
            document, lines = _read_yaml(path)
            if not named and not (isinstance(document, dict) and "descriptor" in document):
                skipped.append(path)
                continue
            loaded.append((path, _descriptor_from(path, document, lines)))
        except DescriptorError as error:
            problems.extend(error.problems)
    if skipped and not loaded and not problems:
        left = f"{NOT_A_DESCRIPTOR}; no descriptor is left"
        raise DescriptorError([Problem(str(path), left) for path in skipped])
    for path in skipped:
        on_skip(path)
    if problems:
        raise DescriptorError(problems)
    return loaded


# --- YAML reading with line numbers ---------------------------------------------------------

_Path = tuple[str | int, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _fail(file: str, message: str, **where: Any) -> DescriptorError:
    return DescriptorError([Problem(file, message, **where)])


def _read_yaml(path: Path) -> tuple[Any, dict[_Path, int]]:
    """Parse `path` into plain data plus a map from document path to 1-based line."""
    file = str(path)
    if not path.is_file():
        raise _fail(file, "not a readable file")
    size = path.stat().st_size
    if size > MAX_DESCRIPTOR_BYTES:
        raise _fail(file, f"file is {size} bytes; descriptors are capped at {MAX_DESCRIPTOR_BYTES}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _fail(file, "file is not valid UTF-8", line=raw[: error.start].count(b"\n") + 1) from None
    try:
        _refuse_aliases(text, file)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = {"line": mark.line + 1, "column": mark.column + 1} if mark else {}
        raise _fail(file, f"invalid YAML: {error.problem or error.context}", **where) from None
    except (yaml.YAMLError, RecursionError) as error:
        raise _fail(file, f"invalid YAML: {type(error).__name__}") from None
    if root is None:
        raise _fail(file, "file is empty")
    lines: dict[_Path, int] = {}
    try:
        document = _to_data(root, (), lines, file)
    except RecursionError:
        raise _fail(file, "document is nested too deeply") from None
    return document, lines


def _refuse_aliases(text: str, file: str) -> None:
    """Aliases are how YAML bombs multiply and descriptors never need them. Checked on the
    event stream, before anything is composed, so the alias's own line is reported."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise _fail(file, "YAML aliases are not allowed in descriptors", line=event.start_mark.line + 1)


def _to_data(node: yaml.Node, at: _Path, lines: dict[_Path, int], file: str) -> Any:
    """Convert a composed node to data, refusing merge keys and duplicate keys."""
    lines[at] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                raise _fail(file, "YAML merge keys are not allowed", line=line)
            key = _scalar(key_node, file)
            if key in result:
                raise _fail(file, f"duplicate key {key!r}", line=line, field=_dotted((*at, key)))
            result[key] = _to_data(value_node, (*at, key), lines, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_to_data(item, (*at, i), lines, file) for i, item in enumerate(node.value)]
    return _scalar(node, file)


def _scalar(node: yaml.Node, file: str) -> Any:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode):
        raise _fail(file, "mapping keys must be plain scalars", line=line)
    try:
        return yaml.constructor.SafeConstructor().construct_object(node)
    except yaml.YAMLError as error:
        raise _fail(file, f"invalid scalar: {getattr(error, 'problem', None) or error}", line=line) from None


def _dotted(at: _Path) -> str:
    return ".".join(str(part) for part in at) or "<document>"


def _validation_problems(path: Path, error: ValidationError, lines: dict[_Path, int]) -> list[Problem]:
    problems = []
    for detail in error.errors(include_url=False):
        field, line = _locate(tuple(detail["loc"]), lines)
        problems.append(Problem(str(path), _message(detail), line=line, field=field))
    return problems


def _locate(loc: _Path, lines: dict[_Path, int]) -> tuple[str, int | None]:
    """Map a pydantic error location to a document path and the line it starts on.

    Tagged unions insert their tag into `loc` (`...predicate.leading_prefix_at_least.blocks`);
    parts that are not document keys are dropped, except a final missing field name.
    """
    at: _Path = ()
    for index, part in enumerate(loc):
        if (*at, part) in lines or index == len(loc) - 1:
            at = (*at, part)
    known = at
    while known and known not in lines:
        known = known[:-1]
    return _dotted(at), lines.get(known, lines.get(()))


def _message(detail: dict[str, Any]) -> str:
    message = str(detail["msg"])
    if detail["type"] == "extra_forbidden":
        return "unknown field"
    if detail["type"] in ("enum", "literal_error"):
        return f"{message} (got {detail.get('input')!r})"
    return message
