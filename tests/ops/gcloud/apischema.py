"""Google's request schemas as the Cloud SDK ships them: the apitools message classes of
``<sdk>/lib/googlecloudsdk/generated_clients/apis/<api>/<version>/<api>_<version>_messages.py``, read as text
(the SDK is not imported) into {class: fields}, and a strict check of a REST JSON document against one class:
every key a field of the class, every enum value one of its names, messages and maps checked all the way down.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path


@dataclass
class Field:
    kind: str                  # String, Integer, Boolean, Float, Bytes, Message, Enum
    type: str | None = None    # the message or enum class a Message/Enum field names
    repeated: bool = False


@dataclass
class MessageClass:
    name: str                  # dotted: QueuedResource.LabelsValue
    fields: dict[str, Field] = field(default_factory=dict)     # by JSON name
    enum: set[str] | None = None                               # for an Enum class: its value names


def messages_file(sdk: Path, api: str, version: str) -> Path:
    return sdk / "lib" / "googlecloudsdk" / "generated_clients" / "apis" / api / version / f"{api}_{version}_messages.py"


def _collect(node: ast.ClassDef, prefix: str, out: dict[str, MessageClass]) -> None:
    name = f"{prefix}{node.name}"
    cls = MessageClass(name)
    bases = {ast.unparse(b) for b in node.bases}
    if "_messages.Enum" in bases:
        cls.enum = {t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    for stmt in node.body:
        if isinstance(stmt, ast.ClassDef):
            _collect(stmt, f"{name}.", out)
        elif (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
              and ast.unparse(stmt.value.func).startswith("_messages.") and len(stmt.targets) == 1):
            kind = ast.unparse(stmt.value.func).removeprefix("_messages.").removesuffix("Field")
            type_name = None
            if kind in ("Message", "Enum"):
                first = stmt.value.args[0]
                type_name = first.value if isinstance(first, ast.Constant) else ast.unparse(first)
            repeated = any(k.arg == "repeated" and ast.unparse(k.value) == "True" for k in stmt.value.keywords)
            cls.fields[stmt.targets[0].id] = Field(kind, type_name, repeated)
    out[name] = cls


@cache
def load(path: Path) -> dict[str, MessageClass]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: dict[str, MessageClass] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            _collect(node, "", out)
    # encoding.AddCustomJsonFieldMapping(Class, 'python_name', 'jsonName'): the JSON name differs
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("AddCustomJsonFieldMapping")
                and len(node.args) == 3):
            cls = out.get(ast.unparse(node.args[0]))
            python_name, json_name = node.args[1].value, node.args[2].value
            if cls and python_name in cls.fields:
                cls.fields[json_name] = cls.fields.pop(python_name)
    return out


def _resolve(schema: dict[str, MessageClass], scope: str, name: str) -> MessageClass | None:
    """``name`` as apitools resolves it from inside class ``scope``: innermost enclosing class first."""
    parts = scope.split(".")
    for i in range(len(parts), -1, -1):
        candidate = ".".join([*parts[:i], name])
        if candidate in schema:
            return schema[candidate]
    return None


def problems(schema: dict[str, MessageClass], class_name: str, doc, where: str = "") -> list[str]:
    """Every way ``doc`` (REST JSON) is not a ``class_name``; [] when it is one."""
    cls = schema[class_name]
    if not isinstance(doc, dict):
        return [f"{where or class_name}: expected an object for {class_name}, got {type(doc).__name__}"]
    found: list[str] = []
    additional = cls.fields.get("additionalProperties")
    if additional is not None and additional.type == "AdditionalProperty":        # a map<string, V>
        value_field = _resolve(schema, cls.name, "AdditionalProperty").fields["value"]
        for key, value in doc.items():
            found += _value(schema, cls.name + ".AdditionalProperty", value_field, value, f"{where}[{key!r}]")
        return found
    for key, value in doc.items():
        spec = cls.fields.get(key)
        if spec is None:
            found.append(f"{where + '.' if where else ''}{key}: {class_name} has no field {key!r}")
            continue
        path = f"{where + '.' if where else ''}{key}"
        if spec.repeated:
            if not isinstance(value, list):
                found.append(f"{path}: {class_name}.{key} is a list")
                continue
            for i, item in enumerate(value):
                found += _value(schema, cls.name, spec, item, f"{path}[{i}]")
        else:
            found += _value(schema, cls.name, spec, value, path)
    return found


def _value(schema: dict[str, MessageClass], scope: str, spec: Field, value, path: str) -> list[str]:
    if spec.kind == "Message":
        if spec.type == "extra_types.JsonValue":
            return []
        target = _resolve(schema, scope, spec.type or "")
        if target is None:
            return [f"{path}: schema has no class {spec.type!r}"]
        return problems(schema, target.name, value, path)
    if spec.kind == "Enum":
        target = _resolve(schema, scope, spec.type or "")
        if target is None or target.enum is None:
            return [f"{path}: schema has no enum {spec.type!r}"]
        return [] if value in target.enum else [f"{path}: {value!r} is not one of {sorted(target.enum)}"]
    ok = {
        "String": isinstance(value, str),
        "Bytes": isinstance(value, str),
        "Boolean": isinstance(value, bool),
        "Integer": (isinstance(value, int) and not isinstance(value, bool))
                   or (isinstance(value, str) and value.lstrip("-").isdigit()),
        "Float": isinstance(value, (int, float)) and not isinstance(value, bool),
    }.get(spec.kind)
    if ok is None:
        return [f"{path}: unknown field kind {spec.kind}"]
    return [] if ok else [f"{path}: {value!r} is not a {spec.kind}"]
