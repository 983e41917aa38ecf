"""JSON Schemas from pydantic models, without the noise a model prompt does not need."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema


class _CompactSchema(GenerateJsonSchema):
    """Drops the auto-generated `title` of every field: it repeats the property name and costs
    prompt tokens on every request."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        generated = super().model_schema(schema)
        generated.pop("title", None)
        return generated

    def enum_schema(self, schema: core_schema.EnumSchema) -> JsonSchemaValue:
        generated = super().enum_schema(schema)
        generated.pop("title", None)
        return generated


def compact_model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of `model` for a tool's parameters, without titles."""
    schema = model.model_json_schema(schema_generator=_CompactSchema)
    schema.setdefault("properties", {})
    for definition in schema.get("$defs", {}).values():
        definition.pop("title", None)  # the $defs key already names it
    return schema
