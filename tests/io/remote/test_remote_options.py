"""``storage_options`` values checked up front (type and range), and converted exactly to what
obstore takes: an InputError naming the option for a value obstore cannot use, never an
OverflowError, a TypeError or obstore's own error. No server is needed."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from cytepool.errors import InputError
from cytepool.io import read_cube
from cytepool.io.zarr import open_array
from cytepool.io.zarr._remote_options import split_options
from cytepool.io.zarr.remote import MAX_URL_LENGTH, RemoteStore

URL = "http://127.0.0.1:9/x.cube.zarr"  # never asked: every value is refused before a request


@pytest.mark.parametrize("reader", [read_cube, open_array])
@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"retry_timeout": float("inf")}, "retry_timeout"),
        ({"retry_timeout": float("nan")}, "retry_timeout"),
        ({"retry_timeout": 1e300}, "retry_timeout"),
        ({"retry_timeout": -1}, "retry_timeout"),
        ({"retry_timeout": "soon"}, "retry_timeout"),
        ({"max_retries": 2**70}, "max_retries"),
        ({"max_retries": 2.0}, "max_retries"),
        ({"timeout": "two minutes"}, "timeout"),
        ({"timeout": "120"}, "timeout"),
        ({"timeout": "0s"}, "timeout"),
        ({"timeout": datetime.timedelta(days=-1)}, "timeout"),
        ({"connect_timeout": None}, "connect_timeout"),
        ({"pool_idle_timeout": [1]}, "pool_idle_timeout"),
        ({"allow_http": "yes"}, "allow_http"),
        ({"user_agent": 7}, "user_agent"),
        ({"default_headers": {"X-Token": 3}}, "default_headers"),
        ({"pool_max_idle_per_host": -1}, "pool_max_idle_per_host"),
        ({"max_in_flight": "8"}, "max_in_flight"),
        ({"anonymous": "yes"}, "anonymous"),
    ],
)
def test_a_value_obstore_cannot_use_is_an_input_error_naming_it(
    options: dict[str, Any], key: str, reader: Any
) -> None:
    with pytest.raises(InputError, match=rf"storage_options\['{key}'\] for {URL} must be"):
        reader(URL, storage_options=options)


def test_a_credential_of_the_wrong_type_is_not_shown() -> None:
    with pytest.raises(InputError, match="secret_access_key") as info:
        read_cube("s3://bucket/x.cube.zarr", storage_options={"secret_access_key": 12345678})
    assert "12345678" not in str(info.value)


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        (120, "120s"),
        (0.1, "0s 100000000ns"),
        (1e-9, "0s 1ns"),
        (datetime.timedelta(seconds=1, microseconds=5), "1s 5000ns"),
        ("2min 30s", "150s"),
        ("1h30m", "5400s"),
        ("500 ms", "0s 500000000ns"),
    ],
)
def test_durations_are_taken_in_any_form_exactly(given: Any, taken: str) -> None:
    assert split_options("https", {"timeout": given}, URL).client["timeout"] == taken


@pytest.mark.parametrize(
    ("given", "seconds"), [(0, 0), (2.5, 2.5), ("1min", 60), (datetime.timedelta(hours=1), 3600)]
)
def test_retry_timeout_is_taken_in_any_form(given: Any, seconds: float) -> None:
    retry = split_options("s3", {"retry_timeout": given}, URL).retry
    assert retry["retry_timeout"] == datetime.timedelta(seconds=seconds)


def test_values_accepted_make_a_client() -> None:
    pytest.importorskip("obstore")
    options = {
        "timeout": 90,
        "connect_timeout": datetime.timedelta.max,
        "pool_idle_timeout": "0s",
        "pool_max_idle_per_host": 2,
        "retry_timeout": datetime.timedelta.max,
        "max_retries": 2**31 - 1,
        "allow_http": "true",
        "default_headers": {"X-A": b"b"},
    }
    client, in_flight = RemoteStore("https://example.invalid/y.cube.zarr", options).client()
    assert client is not None
    assert in_flight == 32


@pytest.mark.parametrize("reader", [read_cube, open_array])
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://[::1/x.cube.zarr", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999/x.cube.zarr", "Port out of range"),
        ("https://user:pw@127.0.0.1:abc/x.cube.zarr", "Port could not be cast"),
    ],
)
def test_a_url_python_cannot_parse_is_an_input_error(reader: Any, url: str, problem: str) -> None:
    """A bare ValueError of urllib's before: an InputError naming the URL."""
    with pytest.raises(InputError, match=rf"is not a valid URL \({problem}"):
        reader(url)


@pytest.mark.parametrize("reader", [read_cube, open_array])
def test_a_url_too_long_to_request_is_an_input_error(reader: Any) -> None:
    """obstore panicked (a RustPanic, the process sometimes aborting at exit) on a URL longer
    than an HTTP request can carry: refused before any request."""
    base = "http://127.0.0.1:9/"
    fits = base + "a" * (MAX_URL_LENGTH - len(base) - len("/zarr.json"))
    assert RemoteStore(fits).where("zarr.json").endswith("a/zarr.json")
    with pytest.raises(
        InputError, match=r"is too long: the URL of its zarr\.json would have 65535"
    ):
        reader(fits + "a")
    with pytest.raises(InputError, match=r"more than the 61438 a request can carry"):
        RemoteStore("s3://bucket/" + "a" * 62_000)
