"""Checking a DataFrame's payload columns against the type's published schema, on the driver,
before anything is written: a column a handler's class could never decode is refused with
its name and the type it should have, not found in the dead letters later."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import types as T

from aioqueue._wire.schemas import resolved

from ._columns import InvalidDataFrameError

__all__ = ["check_payload_columns"]

_TEXT = (T.StringType, T.CharType, T.VarcharType)
# String fields also take what Spark's to_json writes as ISO 8601 text (msgspec writes a
# datetime field as a plain string), and a decimal-format string takes a Decimal column
# (written as a number, whose digits the decoder keeps).
_STRING_LIKE = (*_TEXT, T.DateType, T.TimestampType, T.TimestampNTZType)
_JSON_KINDS = {str: "string", bool: "boolean", int: "integer", float: "number"}


def check_payload_columns(
    event_type: str, schema: dict[str, Any], columns: Mapping[str, T.DataType]
) -> list[str]:
    """Raises InvalidDataFrameError when a required field has no column, or a column's Spark
    type cannot hold the field's JSON type. Columns the schema does not name are left alone
    (the decoder ignores them). Returns the columns whose field takes no null (not Optional):
    a null in one of those rows would be written and dead-lettered at delivery, so the rows
    are checked before anything is written (PreparedFrame.check_data)."""
    root = resolved(schema, schema)
    properties = root.get("properties")
    if not isinstance(properties, dict):
        return []
    required = [name for name in root.get("required") or [] if name != "id"]
    missing = [name for name in required if name not in columns]
    if missing:
        raise InvalidDataFrameError(
            f"nothing was scheduled: {event_type}'s published schema requires the payload "
            f"field(s) {missing}, which no payload column provides"
        )
    for name, data_type in columns.items():
        spec = properties.get(name)
        if spec is None:
            continue
        problem = _mismatch(schema, spec, data_type, name)
        if problem is not None:
            raise InvalidDataFrameError(
                f"nothing was scheduled: payload column {name!r} does not fit {event_type}'s "
                f"published schema: {problem}"
            )
    return [
        name for name in columns if name in properties and not _takes_null(schema, properties[name])
    ]


def _takes_null(schema: dict[str, Any], spec: Any) -> bool:
    """Whether a field of `spec` accepts a JSON null (an Optional field, or no constraint)."""
    spec = resolved(schema, spec) if isinstance(spec, dict) else spec
    if not isinstance(spec, dict):
        return True
    for combinator in ("anyOf", "oneOf"):
        choices = spec.get(combinator)
        if isinstance(choices, list):
            return any(_takes_null(schema, choice) for choice in choices)
    if isinstance(spec.get("enum"), list):
        return None in spec["enum"]
    kinds = spec.get("type")
    if kinds is None:
        return "const" not in spec or spec["const"] is None
    return "null" in (kinds if isinstance(kinds, list) else [kinds])


def _mismatch(schema: dict[str, Any], spec: Any, data_type: T.DataType, path: str) -> str | None:
    """Why a column (or a nested field) of `data_type` cannot hold `spec`, or None."""
    spec = resolved(schema, spec) if isinstance(spec, dict) else spec
    if not isinstance(spec, dict) or isinstance(data_type, T.NullType):
        return None  # no constraint, or a column of nulls only (checked at delivery)
    for combinator in ("anyOf", "oneOf"):
        choices = spec.get(combinator)
        if isinstance(choices, list):
            problems = [_mismatch(schema, choice, data_type, path) for choice in choices]
            return None if any(p is None for p in problems) else problems[0]
    if isinstance(spec.get("enum"), list):
        kinds = {_JSON_KINDS.get(type(value), "null") for value in spec["enum"]} - {"null"}
        spec = {**spec, "type": sorted(kinds)}
    kinds = spec.get("type")
    if kinds is None:
        return None
    wanted = kinds if isinstance(kinds, list) else [kinds]
    if "null" in wanted and len(wanted) == 1:
        return f"{path} must be null"
    reasons = [_kind_mismatch(schema, spec, kind, data_type, path) for kind in wanted]
    if any(reason is None for reason in reasons):
        return None
    return next(r for r in reasons if r)


def _kind_mismatch(
    schema: dict[str, Any], spec: dict[str, Any], kind: str, data_type: T.DataType, path: str
) -> str | None:
    got = data_type.simpleString()
    if kind == "null":
        return f"{path} is {got}, expected null"
    if kind == "string":
        if isinstance(data_type, _STRING_LIKE):
            return None
        if spec.get("format") == "decimal" and isinstance(data_type, T.DecimalType):
            return None
        return f"{path} is {got}, expected a string{_format(spec)}"
    if kind == "integer":
        integral = isinstance(data_type, T.IntegralType) or (
            isinstance(data_type, T.DecimalType) and data_type.scale == 0
        )
        return None if integral else f"{path} is {got}, expected an integer column"
    if kind == "number":
        numeric = isinstance(data_type, T.NumericType)
        return None if numeric else f"{path} is {got}, expected a number column"
    if kind == "boolean":
        boolean = isinstance(data_type, T.BooleanType)
        return None if boolean else f"{path} is {got}, expected a boolean column"
    if kind == "array":
        if not isinstance(data_type, T.ArrayType):
            return f"{path} is {got}, expected an array column"
        items = spec.get("items")
        return _mismatch(schema, items, data_type.elementType, f"{path}[]")
    if kind == "object":
        return _object_mismatch(schema, spec, data_type, path)
    return None


def _object_mismatch(
    schema: dict[str, Any], spec: dict[str, Any], data_type: T.DataType, path: str
) -> str | None:
    if isinstance(data_type, T.MapType):
        values = spec.get("additionalProperties")
        if not isinstance(data_type.keyType, _TEXT):
            return f"{path} is {data_type.simpleString()}, expected string keys"
        return _mismatch(schema, values, data_type.valueType, f"{path}{{}}")
    if not isinstance(data_type, T.StructType):
        return f"{path} is {data_type.simpleString()}, expected a struct (or map) column"
    fields = {field.name: field.dataType for field in data_type.fields}
    declared = spec.get("properties")
    properties: dict[str, Any] = declared if isinstance(declared, dict) else {}
    for name in spec.get("required") or []:
        if name not in fields:
            return f"{path}.{name} is missing from the struct"
    for name, field_type in fields.items():
        if name in properties:
            problem = _mismatch(schema, properties[name], field_type, f"{path}.{name}")
            if problem is not None:
                return problem
    return None


def _format(spec: dict[str, Any]) -> str:
    detail = spec.get("format")
    return f" ({detail})" if isinstance(detail, str) else ""
