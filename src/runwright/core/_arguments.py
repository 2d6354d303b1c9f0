"""Arguments checked against a function's type hints, with pydantic, in one place: a task's
(at submission, and again when a worker rebuilds them from the stored JSON) and a tool's
(as a model sends them).

The check is pydantic's lax mode, as FastAPI checks a request: JSON-shaped input is
coerced to the hinted type where pydantic's lax rules allow it ("3" -> 3 for an `int`,
"2026-12-01T09:00:00Z" -> a datetime, a dict -> a pydantic model), and anything else is
refused naming the argument, the place within it and what was expected:

    task 'double': argument 'n': Input should be a valid integer, unable to parse string
    as an integer (got 'abc')

A parameter without a hint, or hinted `Any` or `object`, takes anything (as given); a
function whose parameters are all such is never checked at all (`typed` is False), so it
pays nothing. Hints are read without pydantic when the function is registered (a string
hint, `from __future__ import annotations`, is resolved in the function's module, so it
may name a class defined after the function); pydantic itself is imported, and the
validator built, at the first check: an app without typed tasks or tools never loads it.
"""

from __future__ import annotations

import inspect
import reprlib
import types
import typing
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ..errors import BadArguments, ConfigError, SerializationError

if TYPE_CHECKING:
    import pydantic

__all__ = ["TypedArguments"]

_UNCHECKED = (Any, object)  # hints that take anything: nothing to check
_SHOWN_ERRORS = 5  # a message names at most this many problems, then says how many more
_SHOWN_INPUT = 60  # characters of the refused value shown


class _Unresolved:
    """A string hint that did not resolve at registration (a name defined later, or not
    at all): resolved again when the validator is built, and a ConfigError then."""

    __slots__ = ("text", "error")

    def __init__(self, text: str, error: Exception) -> None:
        self.text, self.error = text, error


class TypedArguments:
    """The type hints of a function's parameters, and the one check of arguments against
    them. `owner` names the function in messages ("task 'double'", "tool 'add'").

    For a task (`complete=False`), only the arguments given are checked (a missing or
    unknown one was refused by the signature already) and only against a hint that checks
    something; defaults are not filled in (a run stores what was given). For a tool
    (`complete=True`), the arguments are the model's whole call: every parameter is a field,
    required unless it has a default (which is then filled in), any other name is refused,
    and `json_schema()` is what the model is shown (with `descriptions`, by parameter)."""

    __slots__ = ("owner", "typed", "_fn", "_params", "_named", "_hints", "_complete", "_descriptions",
                 "_validator", "_extras", "_plain", "_refused")

    def __init__(self, owner: str, fn: Callable[..., Any], parameters: Iterable[inspect.Parameter], *,
                 complete: bool = False, descriptions: Mapping[str, str] | None = None) -> None:
        self.owner = owner
        self._fn = fn
        self._params = {p.name: p for p in parameters}
        self._named = {name for name, p in self._params.items() if p.kind is not p.VAR_KEYWORD}
        self._complete = complete
        self._descriptions = dict(descriptions or {})
        self._hints = {name: _resolve(fn, p.annotation) for name, p in self._params.items()}
        self._validator: pydantic.TypeAdapter[Any] | None = None
        self._extras: pydantic.TypeAdapter[Any] | None = None  # a typed **kwargs' values
        self._plain = False  # whether every checked value is JSON as it is (set by _build)
        # pydantic's ValidationError, once built (pydantic is imported at the first check).
        self._refused: type[pydantic.ValidationError] | None = None
        self.typed = complete or any(hint not in _UNCHECKED for hint in self._hints.values())

    # -- the check ------------------------------------------------------------------------

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the function receives them: checked, and coerced to their hints
        (a pydantic model from a dict, a datetime from ISO text); BadArguments naming each
        argument that does not fit."""
        if not self.typed:
            return dict(arguments)
        checked = self._check(arguments)
        return checked if self._complete else _merged(arguments, checked)

    def to_json(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The checked arguments as JSON values (what a run stores): `validate`, then each
        typed value in pydantic's JSON form (a model as its dict, a datetime as ISO 8601
        text), which `validate` turns back into the same value in a worker."""
        if not self.typed:
            return dict(arguments)
        checked = self._check(arguments)
        if not self._plain:  # else the checked values are JSON already (str, int, list...)
            from pydantic_core import PydanticSerializationError

            assert self._validator is not None  # built by _check
            try:
                shaped = self._validator.dump_python(checked, mode="json", by_alias=True)
                if self._extras is not None:
                    shaped.update(self._extras.dump_python(self._extra_items(checked), mode="json",
                                                           by_alias=True))
            except PydanticSerializationError as exc:
                raise SerializationError(f"{self.owner}: the arguments do not serialize to JSON: "
                                         f"{exc}") from None
            checked = shaped
        return _merged(arguments, checked)

    def _check(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The checked arguments, and only those (coerced to their hints)."""
        validator = self._validator or self._build()
        assert self._refused is not None  # set by _build
        try:
            checked: dict[str, Any] = validator.validate_python(arguments)
            if self._extras is not None:
                checked.update(self._extras.validate_python(self._extra_items(arguments)))
        except self._refused as exc:
            raise BadArguments(self._refusal(exc), fields=_fields(exc)) from None
        return checked

    def _extra_items(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The items of a **kwargs parameter (bound as the arguments' other names)."""
        return {name: value for name, value in arguments.items() if name not in self._named}

    def prepare(self) -> None:
        """Build the validator now (a tool's: a hint that cannot be checked is refused
        where the tool is defined), rather than at the first check."""
        if self._validator is None:
            self._build()

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (of a tool: what the model is shown)."""
        return (self._validator or self._build()).json_schema()

    # -- building ------------------------------------------------------------------------------

    def _build(self) -> pydantic.TypeAdapter[Any]:
        """The validator: a TypedDict of the checked parameters (pydantic validates one
        about twice as fast as a model), and one for the values of a typed **kwargs."""
        import pydantic
        import typing_extensions  # pydantic needs its TypedDict before Python 3.12

        fields: dict[str, Any] = {}
        plain = True
        for name, param in self._params.items():
            hint = self._hint(name)
            if param.kind is param.VAR_KEYWORD:
                if hint not in _UNCHECKED:
                    extras = dict[str, hint]  # type: ignore[valid-type]
                    try:
                        self._extras = _made(extras)
                    except Exception as exc:
                        raise ConfigError(f"{self.owner}: the type hint of **{name} cannot be checked by "
                                          f"pydantic: {str(exc).splitlines()[0]}") from None
                    plain = plain and _is_plain(hint)
                continue
            if not self._complete and hint in _UNCHECKED:
                continue
            plain = plain and _is_plain(hint)
            if self._complete:
                described = self._descriptions.get(name)
                info = pydantic.Field(description=described) if param.default is param.empty \
                    else pydantic.Field(param.default, description=described)
                hint = typing.Annotated[hint, info]
            if not self._complete or param.default is not param.empty:
                hint = typing_extensions.NotRequired[hint]
            fields[name] = hint
        self._plain = plain
        self._refused = pydantic.ValidationError
        try:
            self._validator = _made(self._shape(fields))
        except Exception as exc:  # a hint pydantic has no schema for, or names what is not there
            culprit = next((name for name, hint in fields.items()
                            if not _buildable(self._shape({name: hint}))), None)
            where = f"argument {culprit!r}" if culprit else "the arguments"
            raise ConfigError(f"{self.owner}: the type hint of {where} cannot be checked by pydantic "
                              f"(arguments are JSON, so hint a JSON-shaped type, or Any): "
                              f"{str(exc).splitlines()[0]}") from None
        return self._validator

    def _shape(self, fields: dict[str, Any]) -> Any:
        """A TypedDict of `fields`, of the function's module (where pydantic resolves a
        name a hint holds as text, `list["Line"]`), configured as this check is."""
        import pydantic
        import typing_extensions  # pydantic needs its TypedDict before Python 3.12

        typed_dict: Any = typing_extensions.TypedDict  # made at run time: no literal name
        shape = typed_dict(f"{getattr(self._fn, '__name__', 'function')}_arguments", fields)
        shape.__module__ = getattr(self._fn, "__module__", None) or __name__
        shape.__pydantic_config__ = pydantic.ConfigDict(
            extra="forbid" if self._complete else "ignore",
            allow_inf_nan=False)  # JSON has no NaN or infinity: refused by name, not at encoding
        return shape

    def _hint(self, name: str) -> Any:
        hint = self._hints[name]
        if isinstance(hint, _Unresolved):
            hint = self._hints[name] = _resolve(self._fn, hint.text)
            if isinstance(hint, _Unresolved):
                raise ConfigError(f"{self.owner}: the type hint of argument {name!r} ({hint.text!r}) "
                                  f"cannot be resolved: {hint.error}; define what it names at the top "
                                  f"level of the module {getattr(self._fn, '__module__', '?')!r}")
        return hint

    # -- messages ------------------------------------------------------------------------------

    def _refusal(self, error: pydantic.ValidationError) -> str:
        """One line: the owner, then each problem as `argument 'a.b.0': what (got value)`."""
        problems = error.errors(include_url=False)
        said = [_problem(problem) for problem in problems[:_SHOWN_ERRORS]]
        if len(problems) > _SHOWN_ERRORS:
            said.append(f"and {len(problems) - _SHOWN_ERRORS} more")
        return f"{self.owner}: {'; '.join(said)}"


def _merged(given: Mapping[str, Any], checked: dict[str, Any]) -> dict[str, Any]:
    """The arguments given, with the checked ones in place of theirs (all of them, often)."""
    return checked if len(checked) == len(given) else {**given, **checked}


def _problem(problem: Mapping[str, Any]) -> str:
    where, what = _said(problem)
    return f"argument {where or 'arguments'!r}: {what}"


def _fields(error: pydantic.ValidationError) -> list[tuple[str, str]]:
    """Each problem as (where, what): `args.<argument's path>` (InvalidInput.fields)."""
    return [(f"args.{where}" if where else "args", what)
            for where, what in map(_said, error.errors(include_url=False))]


def _said(problem: Mapping[str, Any]) -> tuple[str, str]:
    """Where a problem is within the arguments ("order.qty", "" for them all) and what it is."""
    where = ".".join(str(part) for part in problem["loc"])
    message = " ".join(str(problem["msg"]).removeprefix("Value error, ").split())
    if problem["type"] in ("missing", "extra_forbidden"):
        return where, message
    return where, f"{message} (got {_shown(problem.get('input'))})"


def _shown(value: Any) -> str:
    """The refused value, short: a few levels and items of a container (a value nested
    deeper than any stack is shown, not walked), a long text cut."""
    text = _REPR.repr(value)
    return text if len(text) <= _SHOWN_INPUT else text[:_SHOWN_INPUT - 3] + "..."


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, _SHOWN_INPUT, _SHOWN_INPUT


def _resolve(fn: Callable[..., Any], annotation: Any) -> Any:
    """A parameter's hint as a type: Any when there is none; a string evaluated in the
    function's module, as typing.get_type_hints does, one parameter at a time, so that the
    function's other hints (its return, its Context) are never evaluated. _Unresolved when
    it names what the module lacks (yet)."""
    if annotation is inspect.Parameter.empty:
        return Any
    if not isinstance(annotation, str):
        return annotation  # a type (a string within it, pydantic resolves in the module)
    holder = types.SimpleNamespace(__annotations__={"hint": annotation})
    namespace = getattr(inspect.unwrap(fn), "__globals__", None) or {}
    try:
        return typing.get_type_hints(holder, globalns=namespace, include_extras=True)["hint"]
    except Exception as exc:  # NameError mostly; a syntax error in the string too
        return _Unresolved(annotation, exc)


_JSON_SCALARS = (str, int, float, bool, type(None))
_PLAIN = (*_JSON_SCALARS, None, Any, object, list, dict, tuple)


def _is_plain(hint: Any) -> bool:
    """Whether every value this hint validates to is JSON as it is (the JSON encoder takes
    it), so that storing it needs no dump to pydantic's JSON form: scalars, lists, tuples
    and dicts of them, unions of them, literals of them. A model, a datetime, an enum, a
    set... is not. (`Any` within passes its value as given, as an unchecked argument is:
    what is not JSON is refused when the arguments are encoded.)"""
    if any(hint is plain for plain in _PLAIN):
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _is_plain(args[0])
    if origin is typing.Literal:
        return all(type(arg) in _JSON_SCALARS for arg in args)
    if origin in (list, dict, tuple, typing.Union, types.UnionType):
        return all(arg is Ellipsis or _is_plain(arg) for arg in args)
    return False


def _made(shape: Any) -> pydantic.TypeAdapter[Any]:
    """pydantic's validator of `shape`, whole: one whose hints name what is missing is
    refused now (pydantic would defer it to its first use)."""
    import pydantic

    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(shape)
    rebuild = getattr(adapter, "rebuild", None)  # pydantic >= 2.10 defers an incomplete one
    if rebuild is not None:
        rebuild(raise_errors=True)
    return adapter


def _buildable(shape: Any) -> bool:
    try:
        _made(shape)
    except Exception:
        return False
    return True
