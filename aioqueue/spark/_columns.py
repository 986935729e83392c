"""Turning a user's DataFrame into the rows the enqueue script takes, and refusing bad input.

Everything here runs on the driver before anything is written: the schema checks cost
nothing, the data checks (null ids, null due times, negative delays) are one aggregation.
Expressions are Spark SQL text (`selectExpr`), not pyspark.sql.functions: those build
classic or Connect columns by a process-wide switch (the SPARK_CONNECT_MODE_ENABLED
variable), not by the session the frame belongs to, while SQL text means the same on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from aioqueue._model.errors import AioqueueError
from aioqueue._model.event import _WIRE_NAME, Event, event_type_name
from aioqueue._wire.keys import validate_prefix

__all__ = ["InvalidDataFrameError", "ScheduleColumns", "checked_event_type", "checked_prefix"]

# Internal column names of the prepared frame; user columns never collide with them because
# the prepared frame holds nothing else.
ID = "_aioqueue_id"
PAYLOAD = "_aioqueue_payload"
DUE_MS = "_aioqueue_due_ms"
CONTEXT = "_aioqueue_context_{}"

# Context values are strings; these cast to a string without losing meaning.
_CONTEXT_ATOMIC_TYPES = (
    T.StringType,
    T.CharType,
    T.VarcharType,
    T.BooleanType,
    T.NumericType,
    T.DateType,
    T.TimestampType,
)
# Types that Spark's to_json writes as plain JSON values a handler's event class can read.
_JSON_ATOMIC_TYPES = (*_CONTEXT_ATOMIC_TYPES, T.TimestampNTZType, T.NullType, T.VariantType)


class InvalidDataFrameError(AioqueueError, ValueError):
    """A DataFrame, or the options naming its columns, cannot be scheduled.

    Raised on the driver before anything is written to Redis.
    """


def checked_event_type(event_type: str | type[Event]) -> str:
    """The wire name of an event class, or a wire name given as text, validated."""
    if isinstance(event_type, type):
        return event_type_name(event_type)
    if not isinstance(event_type, str) or not _WIRE_NAME.fullmatch(event_type):
        raise InvalidDataFrameError(
            f"event type {event_type!r} must be an Event subclass or a wire name of 1-128 "
            "letters, digits, '_', '.' or '-'"
        )
    return event_type


def checked_prefix(prefix: str) -> str:
    try:
        return validate_prefix(prefix)
    except ValueError as exc:
        raise InvalidDataFrameError(str(exc)) from exc


def checked_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidDataFrameError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    return batch_size


@dataclass(frozen=True, slots=True)
class ScheduleColumns:
    """Which columns of the user's DataFrame make the id, due time, payload and context."""

    id_col: str = "id"
    due_col: str | None = None
    delay_col: str | None = None
    payload_cols: Sequence[str] | None = None
    context_cols: Sequence[str] = ()

    @property
    def due_kind(self) -> str:
        """The enqueue script's due kind: epoch ms ('at') or ms from the server's now."""
        return "at" if self.due_col is not None else "delay"

    def prepare(self, df: DataFrame) -> PreparedFrame:
        """Checks the schema and projects the frame to id, payload JSON, due ms and context.

        Raises InvalidDataFrameError for a missing column or a column of the wrong type.
        """
        if self.due_col is not None and self.delay_col is not None:
            raise InvalidDataFrameError(
                f"give due_col ({self.due_col!r}) or delay_col ({self.delay_col!r}), not both"
            )
        fields = {field.name: field for field in df.schema.fields}
        named = [self.id_col, self.due_col, self.delay_col, *self.context_cols]
        if self.payload_cols is not None:
            named += self.payload_cols
        for name in named:
            if name is not None and name not in fields:
                raise InvalidDataFrameError(
                    f"the DataFrame has no column {name!r}; its columns are "
                    f"{', '.join(map(repr, df.columns)) or 'none'}"
                )
        id_type = fields[self.id_col].dataType
        if not isinstance(id_type, (T.StringType, T.CharType, T.VarcharType)):
            raise InvalidDataFrameError(
                f"id column {self.id_col!r} must be a string column, got {id_type.simpleString()};"
                f" cast it, e.g. F.col({self.id_col!r}).cast('string')"
            )
        payload_cols = self._payload_cols(df)
        for name in payload_cols:
            _check_json(name, fields[name].dataType, name)
        context = [
            f"{_context_value(name, fields[name].dataType)} AS {CONTEXT.format(position)}"
            for position, name in enumerate(self.context_cols)
        ]
        columns = [
            f"{_quoted(self.id_col)} AS {ID}",
            f"{_payload_json(payload_cols)} AS {PAYLOAD}",
            f"{self._due_ms(fields)} AS {DUE_MS}",
            *context,
        ]
        return PreparedFrame(
            frame=df.selectExpr(*columns),
            payload_types=tuple((name, fields[name].dataType) for name in payload_cols),
            context_names=tuple(self.context_cols),
            context_maps=tuple(
                isinstance(fields[name].dataType, T.MapType) for name in self.context_cols
            ),
            columns=self,
        )

    def _payload_cols(self, df: DataFrame) -> list[str]:
        if self.payload_cols is not None:
            payload_cols = list(self.payload_cols)
        else:
            taken = {self.id_col, self.due_col, self.delay_col, *self.context_cols}
            payload_cols = [name for name in df.columns if name not in taken]
        duplicates = sorted({name for name in payload_cols if payload_cols.count(name) > 1})
        if duplicates:
            raise InvalidDataFrameError(
                f"payload columns {duplicates} appear more than once; a JSON object needs "
                "unique field names"
            )
        if "id" in payload_cols:
            raise InvalidDataFrameError(
                "a payload column is named 'id': the event id travels beside the payload and "
                f"would replace it (id_col is {self.id_col!r}); rename or drop that column"
            )
        return payload_cols

    def _due_ms(self, fields: dict[str, T.StructField]) -> str:
        """The due time as epoch ms ('at') or a delay in ms, in SQL."""
        if self.due_col is not None:
            due_type = fields[self.due_col].dataType
            if not isinstance(due_type, T.TimestampType):
                hint = (
                    " (a timestamp without time zone: say which zone it is in with "
                    "F.to_utc_timestamp(col, zone))"
                    if isinstance(due_type, T.TimestampNTZType)
                    else ""
                )
                raise InvalidDataFrameError(
                    f"due column {self.due_col!r} must be a timestamp, got "
                    f"{due_type.simpleString()}{hint}"
                )
            return f"unix_millis({_quoted(self.due_col)})"
        if self.delay_col is None:
            return "CAST(0 AS BIGINT)"
        delay = _quoted(self.delay_col)
        delay_type = fields[self.delay_col].dataType
        if isinstance(delay_type, T.IntegralType):
            return f"CAST({delay} AS BIGINT) * 1000"
        if isinstance(delay_type, T.DecimalType):
            return f"CAST(round({delay} * 1000) AS BIGINT)"
        if isinstance(delay_type, (T.FloatType, T.DoubleType)):
            # NaN is no delay at all: make it null so that the data check reports it.
            return (
                f"CASE WHEN isnan({delay}) THEN NULL ELSE CAST(round({delay} * 1000) AS BIGINT) END"
            )
        if isinstance(delay_type, T.DayTimeIntervalType):
            return f"unix_millis(timestamp_seconds(0) + {delay})"
        raise InvalidDataFrameError(
            f"delay column {self.delay_col!r} must hold seconds (a number) or a day-time "
            f"interval, got {delay_type.simpleString()}"
        )


@dataclass(frozen=True, slots=True)
class PreparedFrame:
    """The user's frame as (id, payload JSON, due ms, context values...) rows."""

    frame: DataFrame
    payload_types: tuple[tuple[str, T.DataType], ...]
    """Each payload column's name and Spark type, for the check against a published schema."""
    context_names: tuple[str, ...]
    context_maps: tuple[bool, ...]
    """Per context column: a map whose entries are merged (True) or one value (False)."""
    columns: ScheduleColumns

    def check_data(self, not_null: Sequence[str] = ()) -> None:
        """One aggregation over the frame: raises if any id or due time is unusable, or if a
        payload column in `not_null` (a field that takes no null) holds a null."""
        checks = {
            "null ids": f"{ID} IS NULL",
            "empty ids": f"{ID} = ''",
        }
        for name in not_null:
            # The payload JSON keeps null fields (see _payload_json): a null there is null.
            path = "$['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"
            checks[f"a null in payload column {name!r}, whose field is not Optional"] = (
                f"get_json_object({PAYLOAD}, {_sql_string(path)}) IS NULL"
            )
        if self.columns.due_col is not None:
            checks[f"null due times (column {self.columns.due_col!r})"] = f"{DUE_MS} IS NULL"
        if self.columns.delay_col is not None:
            checks[f"null or NaN delays (column {self.columns.delay_col!r})"] = f"{DUE_MS} IS NULL"
            checks[f"negative delays (column {self.columns.delay_col!r})"] = f"{DUE_MS} < 0"
        row = self.frame.selectExpr(
            *(f"count_if({condition}) AS c{i}" for i, condition in enumerate(checks.values()))
        ).first()
        assert row is not None  # a global aggregation always has one row
        problems = [
            f"{count} rows have {what}" for what, count in zip(checks, row, strict=True) if count
        ]
        if problems:
            raise InvalidDataFrameError(
                f"nothing was scheduled: {'; '.join(problems)} (id column {self.columns.id_col!r})"
            )


def _sql_string(text: str) -> str:
    """`text` as a SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quoted(name: str) -> str:
    """A top-level column by its exact name in SQL, even one with dots or backticks in it."""
    return "`" + name.replace("`", "``") + "`"


def _payload_json(payload_cols: list[str]) -> str:
    if not payload_cols:
        return "'{}'"
    # struct() names each field after its column. Nulls are written as null, not dropped:
    # an Optional field without a default must see null rather than go missing.
    fields = ", ".join(_quoted(name) for name in payload_cols)
    return f"to_json(struct({fields}), map('ignoreNullFields', 'false'))"


def _check_json(column: str, data_type: T.DataType, path: str) -> None:
    if isinstance(data_type, _JSON_ATOMIC_TYPES):
        return
    if isinstance(data_type, T.ArrayType):
        _check_json(column, data_type.elementType, f"{path}[]")
    elif isinstance(data_type, T.StructType):
        for field in data_type.fields:
            _check_json(column, field.dataType, f"{path}.{field.name}")
    elif isinstance(data_type, T.MapType) and isinstance(data_type.keyType, T.StringType):
        _check_json(column, data_type.valueType, f"{path}{{}}")
    else:
        raise InvalidDataFrameError(
            f"payload column {column!r} cannot be written as JSON: {path} is "
            f"{data_type.simpleString()}; convert it (e.g. base64 for binary, seconds for an "
            "interval) or leave it out of payload_cols"
        )


def _context_value(name: str, data_type: T.DataType) -> str:
    if isinstance(data_type, _CONTEXT_ATOMIC_TYPES):
        return f"CAST({_quoted(name)} AS STRING)"
    if (
        isinstance(data_type, T.MapType)
        and isinstance(data_type.keyType, T.StringType)
        and isinstance(data_type.valueType, _CONTEXT_ATOMIC_TYPES)
    ):
        return f"CAST({_quoted(name)} AS MAP<STRING, STRING>)"
    raise InvalidDataFrameError(
        f"context column {name!r} must be a string (or number, boolean, date, timestamp) or a "
        f"map of strings to such values, got {data_type.simpleString()}"
    )
