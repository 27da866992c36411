"""CommandStatementIngest's TableDefinitionOptions -> the append service's ingest modes."""

from __future__ import annotations

import pytest

from flight_server import errors
from flight_server.flightsql.ingest import ingest_mode

UNSPECIFIED, CREATE, FAIL = 0, 1, 2  # TableNotExistOption
E_UNSPECIFIED, E_FAIL, E_APPEND, E_REPLACE = 0, 1, 2, 3  # TableExistsOption


@pytest.mark.parametrize(
    ("if_not_exist", "if_exists", "mode"),
    [
        (CREATE, E_FAIL, "create"),  # adbc mode "create"
        (FAIL, E_APPEND, "append"),  # adbc mode "append"
        (CREATE, E_REPLACE, "replace"),  # adbc mode "replace"
        (CREATE, E_APPEND, "create_append"),  # adbc mode "create_append"
        (CREATE, E_UNSPECIFIED, "create"),
        (UNSPECIFIED, E_APPEND, "append"),
    ],
)
def test_modes(if_not_exist: int, if_exists: int, mode: str) -> None:
    assert ingest_mode(if_not_exist, if_exists) == mode


@pytest.mark.parametrize(
    ("if_not_exist", "if_exists"), [(FAIL, E_FAIL), (UNSPECIFIED, E_UNSPECIFIED), (FAIL, E_REPLACE)]
)
def test_impossible_combinations_are_invalid(if_not_exist: int, if_exists: int) -> None:
    with pytest.raises(errors.InvalidArgument):
        ingest_mode(if_not_exist, if_exists)
