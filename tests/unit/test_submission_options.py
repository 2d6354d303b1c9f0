"""One list of submission options for every face, and built-in job bodies that match
their jobs: held together by tests, so that adding an option or a job parameter in one
place and not the others fails here."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from pydantic import BaseModel

import runwright as rw
from runwright.client._scope import RunScope
from runwright.jobs import register_builtin_jobs
from runwright.jobs._bodies import BODIES
from runwright.server._models import SubmitOptions
from runwright.store._params import RunInsertParams
from runwright.tasks._registry import Registry
from runwright.tasks._submission import OPTIONS, Submission

# Given by the caller's token (tenant) or a header, not by the body of POST /runs; and
# the caller's own database connection, which only a program holds.
NOT_IN_THE_BODY = {"tenant", "traceparent", "connection"}


def test_every_face_takes_the_same_options():
    keyword_only = [p.name for p in inspect.signature(RunScope.submit).parameters.values()
                    if p.kind is p.KEYWORD_ONLY]
    assert sorted(keyword_only) == sorted(OPTIONS)
    assert {f.name for f in dataclasses.fields(Submission)} - {"parent_id"} == set(OPTIONS)
    assert set(SubmitOptions.model_fields) == set(OPTIONS) - NOT_IN_THE_BODY


@pytest.mark.parametrize("job", sorted(BODIES))
def test_each_job_body_has_the_fields_and_defaults_of_its_job(job):
    spec = builtin_jobs().tasks[job]
    model: type[BaseModel] = BODIES[job]
    parameters = spec.signature.parameters
    assert set(model.model_fields) == set(parameters)
    for name, field in model.model_fields.items():
        default = parameters[name].default
        assert field.is_required() == (default is inspect.Parameter.empty), name
        if not field.is_required():
            assert field.get_default() == default, name


def test_a_chain_step_with_an_unknown_field_is_refused_not_dropped():
    with pytest.raises(rw.InvalidInput, match=r"unknown fields \['neds'\]"):
        builtin_jobs().tasks["chain"].check({"steps": [{"id": "a", "task": "webhook", "args": {"url": "x"},
                                             "neds": ["b"]}]})


def builtin_jobs() -> Registry:
    registry = Registry()
    register_builtin_jobs(registry)
    return registry


def test_a_remade_insert_keeps_every_field_but_its_key_and_arguments():
    # remade() is positional (see RunInsertParams.remade): a field added or moved in the
    # class and not there would shift the others, and a batch would insert wrong values.
    fields = dataclasses.fields(RunInsertParams)
    distinct = {f.name: f"value of {f.name}" for f in fields}  # types aside: only identity counts
    shared = RunInsertParams(**distinct)
    made = shared.remade("another key", "other arguments")
    assert {f.name: getattr(made, f.name) for f in fields} == {
        **distinct, "key": "another key", "args": "other arguments"}
