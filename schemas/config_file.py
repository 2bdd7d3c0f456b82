"""A flowplanner config file: planner settings per deployment name, in YAML or JSON (a file,
or inline JSON), and how it is read::

    deployments:
      llama-disagg:
        mode: disagg
        optimization_target: sla
        ttft_ms: 500
        itl_ms: 50
        enable_load_scaling: true

Each deployment's settings are a :class:`schemas.config.PlannerConfig`. A file that names a key
twice is refused (YAML would silently keep the last one; a YAML merge key, ``<<: *anchor``, is
no duplicate, and a key given beside it overrides the merged one), and a deployment name is at
most 253 characters (``schemas.events.MAX_DEPLOYMENT_NAME``: events cannot carry a longer
one). Every error is one :class:`ConfigError` naming the file, and the line or the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.config import PlannerConfig
from schemas.events import MAX_DEPLOYMENT_NAME


class ConfigError(ValueError):
    """A config that cannot be used; the message names every offending field.

    >>> try:
    ...     load_config('{"deployments": {"d": {"ttft_ms": -1}}}')
    ... except ConfigError as error:
    ...     print(str(error).splitlines()[-1].strip())
    deployments.d.ttft_ms: Input should be greater than 0
    """


PLANNER_FILE_SCHEMA_DESCRIPTION = (
    "A flowplanner config file: planner settings per deployment name. The schema lists every "
    "field under its name and its aliases, with its type and bounds. The planner checks more "
    "than a JSON Schema can say, so a file this schema accepts may still be refused, naming "
    "the field: tick intervals on the 10 ms grid, an integer field given as 1.0 (an integer "
    "to JSON Schema, not to the planner), the rules between fields (at least one scaling loop "
    "on, minimum endpoints within max_gpu_budget, ...), and a key named twice."
)
"""The top-level description of ``flowplanner schema PlannerFile`` (what it cannot check)."""


def _planner_file_schema(schema: dict[str, Any]) -> None:
    schema["description"] = PLANNER_FILE_SCHEMA_DESCRIPTION


class PlannerFile(BaseModel):
    """A config file: planner settings per deployment name.

    >>> PlannerFile.model_validate({"deployments": {"a": {"mode": "agg"}}}).deployments["a"].mode
    'agg'
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_planner_file_schema)

    deployments: dict[
        Annotated[str, Field(min_length=1, max_length=MAX_DEPLOYMENT_NAME)], PlannerConfig
    ] = Field(min_length=1)
    """Deployment name → its config. A name has 1 to ``MAX_DEPLOYMENT_NAME`` (253) characters,
    as the events naming it (a longer one would dead-letter every event of the deployment)."""


_UNUSED = "a field of the reference planner that flowplanner does not use; remove it"
_PROMETHEUS_INPUT = (
    "a field of the reference planner: Prometheus is an input here — "
    "--input prometheus://HOST:PORT?deployment=D, or the PROMETHEUS_* environment variables"
)
REFERENCE_FIELD_HINTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "backend",
            "environment",
            "namespace",
            "model_name",
            "global_planner_namespace",
            "log_dir",
            "pre_deployment_sweeping_mode",
            "aic_interpolation",
            "aic_perf_model",
            "isl",
            "osl",
            "load_metric_samples",
            "report_filename",
            "report_write_gzip_log",
            "live_dashboard_port",
            "scheduling",
            "plugin_registration",
        ),
        _UNUSED,
    ),
    **dict.fromkeys(
        (
            "metric_pulling_prometheus_endpoint",
            "metric_pulling_prometheus_token",
            "metric_pulling_prometheus_token_file",
            "metric_pulling_prometheus_ssl_verify",
            "metric_pulling_prometheus_extra_query_params",
            "metric_pulling_prometheus_ca_bundle",
            "metric_pulling_prometheus_request_timeout_seconds",
        ),
        _PROMETHEUS_INPUT,
    ),
    "prophet_window_size": "Prophet is replaced by load_predictor 'holt_winters' "
    "(seasonal_period_seconds); remove it",
    "adjustment_interval": "an older name: use throughput_adjustment_interval_seconds",
    "load_learning_window": "an older name: use max_num_fpm_samples",
    "scaling_mode": "an older setting: use advisory: true for 'advisory', remove it for 'active'",
    "no_operation": "an older setting: use advisory: true",
    "advisory_log_interval": "an older setting: advisory decisions are logged; remove it",
}
"""Fields of the reference PlannerConfig (spec §9), and older names of its fields, that this
planner does not take: rejected like any unknown field, but the error says why and what to use
instead, so a copied reference config is easy to port."""

_TYPE_ERRORS = frozenset({"bool_type", "float_type", "int_type", "string_type"})


def _clipped(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(config)"
        message = item["msg"]
        if item["type"] in _TYPE_ERRORS:
            message += f", got {_clipped(item['input'])}"
        if item["type"] == "extra_forbidden":
            message = REFERENCE_FIELD_HINTS.get(str(item["loc"][-1]), message)
        if item["loc"][-1] == "load_predictor" and item["input"] == "prophet":
            message = "Prophet is replaced by 'holt_winters' here (seasonal_period_seconds)"
        lines.append(f"  {where}: {message}")
    return "invalid planner config:\n" + "\n".join(lines)


def _yaml_position(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def _yaml_problem(error: yaml.YAMLError) -> str:
    parts = [getattr(error, "context", None), getattr(error, "problem", None)]
    text = ", ".join(part for part in parts if part)
    return text or str(error).splitlines()[0]


class _DuplicateKey(Exception):
    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping naming a key twice is an error (PyYAML keeps
    the last value silently: a deployment defined twice lost its first definition).

    Merge keys (``<<: *defaults``) are YAML's way to share settings, not duplicates: only the
    keys the mapping names itself are checked, and one of them overrides a merged key of the
    same name (PyYAML's merge does that). The merged mapping was checked where it is defined.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = first_line.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error says so
                continue
            if first is not None:  # also on the same line: ``{a: 1, a: 2}``
                raise _DuplicateKey(
                    f"duplicate key {key!r} (first at line {first})",
                    line,
                    key_node.start_mark.column + 1,
                )
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


# Numbers and booleans are read as YAML 1.2 and JSON write them, not as YAML 1.1 (PyYAML)
# does. 1.1 reads ``010`` as octal 8, ``0b11`` as 3, ``0x1F`` as 31, ``1:30`` as 90, ``1_000``
# as 1000 and ``no``/``off`` as false — values nobody meant to write there — and ``1e-3`` or
# ``1.5e3`` (an exponent without a dot or a sign) as strings. Here an integer is decimal,
# without leading zeros, a float is decimal with an optional exponent (or ``.inf`` / ``.nan``,
# which the fields refuse by name) and a boolean ``true`` or ``false``; any other spelling is a
# string, which a number or boolean field refuses showing the text as written.
_INT_TAG, _FLOAT_TAG, _BOOL_TAG = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool"))
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG, _BOOL_TAG)
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_UniqueKeyLoader.add_implicit_resolver(
    _INT_TAG, re.compile(r"^[-+]?(0|[1-9][0-9]*)$"), list("-+0123456789")
)
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _value in pairs:
        if key in seen:
            raise _DuplicateKey(f"duplicate key {key!r} in a JSON object")
        seen.add(key)
    return dict(pairs)


def _parse_json(raw: str) -> Any:
    return json.loads(raw, object_pairs_hook=_unique_json_object)


def _parse_yaml(raw: str) -> Any:
    return yaml.load(raw, Loader=_UniqueKeyLoader)


def load_config(source: str | Path) -> dict[str, PlannerConfig]:
    """Load a config from a ``.yaml``/``.yml``/``.json`` file or an inline JSON string.

    Raises :class:`ConfigError` with one line per invalid field, or naming a key the file
    has twice (and where).

    >>> load_config('{"deployments": {"d": {"optimization_target": "sla"}}}')["d"].ttft_ms
    500.0
    """
    raw, where, parse = _config_source(source)
    data = _parsed_config(raw, where, parse)
    _check_deployments_mapping(data, where)
    try:
        return dict(PlannerFile.model_validate(data).deployments)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc


def _config_source(source: str | Path) -> tuple[str, str, Callable[[str], Any]]:
    """The text of a config, what its errors call it (the file, or ``inline config``) and its
    parser: JSON inline or for a ``.json`` file, else YAML."""
    text = str(source)
    if text.lstrip().startswith("{"):
        return text, "inline config", _parse_json
    path = Path(text)
    raw = _read_config_file(path)
    return raw, str(path), _parse_json if path.suffix == ".json" else _parse_yaml


def _read_config_file(path: Path) -> str:
    """The UTF-8 text of a config file; a :class:`ConfigError` if there is none to read."""
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    if path.is_dir():
        raise ConfigError(f"config {path} is a directory, not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {path} is not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc


def _parsed_config(raw: str, where: str, parse: Callable[[str], Any]) -> Any:
    """``raw`` parsed; a :class:`ConfigError` naming ``where`` (and the line, if known) if it
    cannot be."""
    try:
        return parse(raw)
    except _DuplicateKey as exc:
        at = f":{exc.line}:{exc.column}" if exc.line is not None else ""
        raise ConfigError(
            f"{where}{at}: {exc.message}: a key may appear once (YAML and JSON keep only the "
            "last one); merge or rename the two"
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{where}:{exc.lineno}:{exc.colno}: config is not valid JSON: {exc.msg}"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{where}{_yaml_position(exc)}: config is not valid YAML: {_yaml_problem(exc)}"
        ) from exc
    except ValueError as exc:  # an integer of more than 4 300 digits (int's limit)
        language = "JSON" if parse is _parse_json else "YAML"
        raise ConfigError(f"{where}: config is not valid {language}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{where}: config is nested too deeply to read") from None


def _check_deployments_mapping(data: Any, where: str) -> None:
    """A parsed config is a mapping, and names its deployments (under ``deployments``)."""
    if data is None:
        raise ConfigError(f"{where} is empty: it needs a 'deployments' mapping")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: config must be a mapping with a 'deployments' key, "
            f"not a {type(data).__name__}"
        )
    if "deployments" not in data and PlannerConfig.model_fields.keys() & data.keys():
        raise ConfigError(
            f"{where}: this looks like one deployment's planner settings; a config names its "
            "deployments: put them under 'deployments: {NAME: ...}'"
        )
