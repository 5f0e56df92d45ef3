"""Typed input errors. Every way input can be wrong ends here, with file, line and field.

Callers (the CLI, the refinement reader) turn an `InputError` into exit code 2 and a readable
message; none of them prints a traceback for bad input.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one input, located as precisely as the input allows.

    `line` and `column` are 1-based; `None` when the problem concerns the whole file (too
    large, not found). `field` is a dotted path into the document (`adapters.0.depth`).
    """

    file: str
    message: str
    line: int | None = None
    column: int | None = None
    field: str | None = None

    def render(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        field = f" [{self.field}]" if self.field else ""
        return f"{where}{field}: {self.message}"


class InputError(Exception):
    """Input that is not what it claims to be: malformed, unknown, too large, missing."""

    def __init__(self, problems: list[Problem]) -> None:
        if not problems:
            raise ValueError("InputError needs at least one problem")
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


class DescriptorError(InputError):
    """A runtime descriptor that cannot be read as format `descriptor: 1`."""
