"""The one YAML reader for files users hand tpuctl (stack config files, tuning specs): bytes in, a document or one
line out.

The bytes must be UTF-8 (a BOM is allowed); the loader is PyYAML's SafeLoader without aliases (``*name``: "billion
laughs" documents) and with a nesting limit, both checked while composing, before anything is built, and a key
given twice in one mapping is refused (PyYAML keeps the last one silently: a stack file's second `config:` block
would replace the first). Every
failure is a one-line ``DomainError`` that names the file and what it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ground.errors import DomainError

#: Deepest YAML nesting accepted: a stack file needs 4 (document, config, a list or a secure mapping), a tuning
#: spec 4 (document, parameters, a parameter, its values).
MAX_NESTING = 16


def _loader(what: str):
    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader without aliases and with a nesting limit (both checked while composing, before building)."""
        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.MarkedYAMLError(None, None, f"aliases (*name) are not allowed in a {what}", mark)
            self.depth += 1
            try:
                if self.depth > MAX_NESTING:
                    mark = self.peek_event().start_mark
                    raise yaml.MarkedYAMLError(None, None, f"nested more than {MAX_NESTING} levels deep", mark)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen = set()
                for key_node, _value in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        if key in seen:
                            raise yaml.MarkedYAMLError(None, None, f"the key {str(key)[:80]!r} is given twice",
                                                       key_node.start_mark)
                        seen.add(key)
                    except TypeError:     # an unhashable key: the constructor says so below
                        pass
            return super().construct_mapping(node, deep)

    return BoundedLoader


def parse_yaml(data: bytes, what: str, path: Path | str) -> Any:
    """``data`` (the whole file, already size-bounded by the caller) -> the YAML document; a one-line DomainError
    ``<what> <path> is not …`` otherwise."""

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DomainError(f"{what} {path} is not UTF-8 text "
                          f"(byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        return yaml.load(text, Loader=_loader(what))
    except yaml.YAMLError as exc:
        raise DomainError(f"{what} {path} is not valid YAML: {_yaml_line(exc)}") from None
    except RecursionError:
        raise DomainError(f"{what} {path} is nested too deeply") from None
    except ValueError as exc:  # an integer longer than Python's digit limit, a date like 2020-13-45
        first = (str(exc).splitlines() or ["bad value"])[0][:120]
        raise DomainError(f"{what} {path} has a value YAML cannot carry: {first}") from None


def _yaml_line(exc: Exception) -> str:
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem:
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{problem}{where}"
    return (str(exc).splitlines() or ["unknown error"])[0]
