"""The error hierarchy: everything emitter_filter raises on purpose is an `EmitterFilterError`."""

from __future__ import annotations

import inspect

import pytest

import emitter_filter
from emitter_filter import errors

pytestmark = pytest.mark.filetools

CLASSES = [getattr(errors, name) for name in errors.__all__]


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_error_class_derives_from_the_base_and_is_exported(cls):
    assert issubclass(cls, errors.EmitterFilterError)
    assert getattr(emitter_filter, cls.__name__) is cls


def test_the_errors_module_defines_no_error_outside_its_all():
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    }
    assert defined == set(errors.__all__)


def test_a_bug_of_ours_is_not_swallowed_by_except_assertion_error():
    assert not issubclass(errors.InvariantError, AssertionError)
    with pytest.raises(errors.InvariantError):
        try:
            raise errors.InvariantError("a bug")
        except AssertionError:  # what a user's test helper may catch
            pass


def test_a_file_format_error_is_exported_and_is_a_program_format_error():
    assert emitter_filter.PteFormatError is errors.PteFormatError
    assert issubclass(emitter_filter.PteFormatError, emitter_filter.ProgramFormatError)
    assert issubclass(emitter_filter.PteFormatError, ValueError)
    error = emitter_filter.PteFormatError("m.pte", "truncated", offset=8)
    assert (str(error), error.path, error.offset) == ("m.pte: offset 8: truncated", "m.pte", 8)


def test_a_missing_report_is_ours_and_still_a_lookup_error():
    assert issubclass(emitter_filter.ReportNotFoundError, LookupError)
