"""``flowplanner schema PlannerFile`` agrees with ``load_config`` on the names a field takes.

The documented aliases (``ttft``, ``itl``, ``load_adjustment_interval``,
``throughput_adjustment_interval``) loaded but the schema refused them ("Additional
properties are not allowed"), so a config editor flagged a config the planner runs.
"""

from __future__ import annotations

import json

import pytest
from pydantic import AliasChoices

from flows.commands.schema import wire_schemas
from schemas import ConfigError, PlannerConfig, load_config

ALIASES = {
    "ttft": "ttft_ms",
    "itl": "itl_ms",
    "load_adjustment_interval": "load_adjustment_interval_seconds",
    "throughput_adjustment_interval": "throughput_adjustment_interval_seconds",
}


def config_schema() -> dict:
    return wire_schemas()["PlannerFile"]["$defs"]["PlannerConfig"]


def names_the_loader_takes() -> set[str]:
    names = set(PlannerConfig.model_fields)
    for field in PlannerConfig.model_fields.values():
        if isinstance(field.validation_alias, AliasChoices):
            names.update(a for a in field.validation_alias.choices if isinstance(a, str))
    return names


def test_the_schema_names_every_name_the_loader_takes():
    assert set(config_schema()["properties"]) == names_the_loader_takes()
    assert set(ALIASES) <= names_the_loader_takes()


@pytest.mark.parametrize(("alias", "field"), ALIASES.items())
def test_an_alias_has_its_fields_type_and_bounds(alias, field):
    properties = config_schema()["properties"]
    canonical = {k: v for k, v in properties[field].items() if k not in ("default", "title")}
    assert properties[alias] == canonical | {"description": f"alias of {field}"}
    value = 300 if alias in ("ttft", "itl") else 60
    loaded = load_config(json.dumps({"deployments": {"d": {alias: value}}}))["d"]
    assert getattr(loaded, field) == value


@pytest.mark.parametrize(("alias", "field"), ALIASES.items())
def test_a_field_named_both_ways_is_refused_by_both(alias, field):
    assert {"not": {"required": [field, alias]}} in config_schema()["allOf"]
    with pytest.raises(ConfigError, match=f"deployments.d.{alias}: Extra inputs"):
        load_config(json.dumps({"deployments": {"d": {alias: 60, field: 60}}}))


def test_the_schema_says_what_only_the_planner_checks():
    description = wire_schemas()["PlannerFile"]["description"]
    assert "aliases" in description and "10 ms grid" in description and "1.0" in description
    assert ">>>" not in description  # not the class's doctest
