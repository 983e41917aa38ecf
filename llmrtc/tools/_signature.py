"""Build a tool's argument model from a function: type hints plus a Google-style docstring."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from llmrtc.tools.context import ToolContext

_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|Examples?|Notes?|"
    r"Attributes|Todo|Warnings?|See Also|References):\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


class ParsedDocstring(typing.NamedTuple):
    summary: str
    params: dict[str, str]


def parse_google_docstring(doc: str | None) -> ParsedDocstring:
    """Split a Google-style docstring into its description and its `Args:` entries."""
    if not doc:
        return ParsedDocstring("", {})
    lines = inspect.cleandoc(doc).splitlines()
    summary_lines: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for raw in lines:
        header = _SECTION.match(raw.strip()) if not raw.startswith((" ", "\t")) else None
        if header:
            section, current, arg_indent = header.group(1), None, None
            continue
        if section is None:
            summary_lines.append(raw.strip())
            continue
        if section not in ("Args", "Arguments", "Parameters", "Params") or not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip())
        match = _ARG_LINE.match(raw.strip())
        if match and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1).lstrip("*")
            params[current] = match.group(3).strip()
        elif current is not None:
            params[current] = f"{params[current]} {raw.strip()}".strip()
    paragraphs = "\n".join(summary_lines).strip().split("\n\n")
    summary = "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    return ParsedDocstring(summary, params)


def _is_context(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    if get_origin(annotation) is Annotated:
        return _is_context(get_args(annotation)[0])
    # Optional[ToolContext] / ToolContext | None
    args = get_args(annotation)
    return bool(args) and ToolContext in args and all(a in (ToolContext, type(None)) for a in args)


def _has_description(annotation: Any) -> bool:
    if get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in get_args(annotation)[1:])


class FunctionSignature(typing.NamedTuple):
    model: type[BaseModel]
    context_param: str | None
    positional: tuple[str, ...]
    description: str
    unannotated: tuple[str, ...]
    """Parameters without a type hint (the model is told nothing about them)."""


def signature_model(
    fn: Callable[..., Any], model_name: str, local_names: dict[str, Any] | None = None
) -> FunctionSignature:
    """The argument model of `fn` (a `ToolContext` parameter is injected, not part of the schema).

    Args:
        fn: The function.
        model_name: The tool name, used for the model and in errors.
        local_names: Extra names for resolving string annotations (the decorator's call site).

    Raises:
        ValueError: for `*args`/`**kwargs` or hints that cannot be resolved.
    """
    try:
        hints = typing.get_type_hints(fn, localns=local_names, include_extras=True)
    except Exception as exc:  # NameError for unresolvable forward references, mostly
        raise ValueError(f"tool {model_name!r}: cannot resolve type hints: {exc}") from exc
    doc = parse_google_docstring(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    context_param: str | None = None
    positional: list[str] = []
    unannotated: list[str] = []
    parameters = list(inspect.signature(fn).parameters.values())
    if parameters and parameters[0].name in ("self", "cls"):
        raise ValueError(
            f"tool {model_name!r}: @tool cannot decorate a method inside its class (its "
            f"{parameters[0].name!r} would become a tool argument); decorate the bound method "
            "instead: tool(instance.method)"
        )
    for param in parameters:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(
                f"tool {model_name!r}: *args/**kwargs cannot be described to a model; "
                f"declare each parameter ({param.name!r})"
            )
        if param.name not in hints:
            unannotated.append(param.name)
        annotation = hints.get(param.name, Any)
        if _is_context(annotation):
            context_param = param.name
            continue
        if param.kind == param.POSITIONAL_ONLY:
            positional.append(param.name)
        default = param.default
        if isinstance(default, FieldInfo):
            info = default
        else:
            info = Field(...) if default is inspect.Parameter.empty else Field(default)
        if info.description is None and not _has_description(annotation):
            description = doc.params.get(param.name)
            if description:
                info = FieldInfo.merge_field_infos(info, description=description)
        fields[param.name] = (annotation, info)
    try:
        model = create_model(
            model_name, __config__=ConfigDict(extra="forbid", protected_namespaces=()), **fields
        )
    except Exception as exc:  # PydanticUserError, PydanticSchemaGenerationError, NameError
        raise ValueError(f"tool {model_name!r}: cannot build an argument schema: {exc}") from exc
    dropped = [name for name in fields if name not in model.model_fields]
    if dropped:
        raise ValueError(
            f"tool {model_name!r}: parameter names {dropped} are reserved by pydantic; rename them"
        )
    return FunctionSignature(
        model, context_param, tuple(positional), doc.summary, tuple(unannotated)
    )
