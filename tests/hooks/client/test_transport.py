"""What both transports share, on its own: the body cap (after decompression) and the redirect rule.

The same limits over real HTTP, through the sync and the async path, are in
tests/hooks/test_hostile_services.py.
"""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest

from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewRedirectError,
    CrewResponseTooLargeError,
    CrewServerError,
)
from airflow_provider_crew.hooks.client.limits import INFLATE_STEP, BodyReader, describe_size
from airflow_provider_crew.hooks.client.redirects import MAX_REDIRECTS, redirect_target
from airflow_provider_crew.hooks.client.request import Call
from airflow_provider_crew.testing.faults import gzip_bomb_body

BASE = "https://crew.example.test"
MiB = 1024 * 1024


def call(method: str = "GET", path: str = "/k-1/status", consequence: str = "") -> Call:
    return Call(method, f"{BASE}{path}", f"{method} {path}", headers={}, consequence=consequence)


def read(body: bytes, max_bytes: int, encoding: str | None = None, chunk: int = 65536) -> bytes:
    headers = {"Content-Encoding": encoding} if encoding else {}
    reader = BodyReader(call(), 200, headers, max_bytes)
    for start in range(0, len(body), chunk):
        reader.feed(body[start : start + chunk])
    return reader.finish()


# -- the body cap ----------------------------------------------------------------------------------


def test_a_body_up_to_the_cap_is_read_whole():
    assert read(b"x" * 1000, max_bytes=1000) == b"x" * 1000


def test_a_body_over_the_cap_fails_naming_endpoint_cap_setting_and_consequence():
    reader = BodyReader(call(consequence="Crew execution k-1 may still be running."), 200, {}, 1000)
    reader.feed(b"x" * 1000)

    with pytest.raises(CrewResponseTooLargeError) as caught:
        reader.feed(b"x")

    message = str(caught.value)
    assert message.startswith(
        "GET /k-1/status answered with a body over 1000 bytes (counted after decompression)"
    )
    assert "'max_response_bytes'" in message and "now 1000" in message
    assert "not repeated" in message
    assert message.endswith("Crew execution k-1 may still be running.")
    assert (caught.value.endpoint, caught.value.limit) == ("GET /k-1/status", 1000)
    # A configuration error to the waits: polling again cannot make the body smaller.
    assert isinstance(caught.value, CrewConfigurationError)


def test_an_honest_content_length_over_the_cap_fails_before_reading():
    with pytest.raises(CrewResponseTooLargeError, match="over 1 KiB"):
        BodyReader(call(), 200, {"Content-Length": "1025"}, 1024)


@pytest.mark.parametrize("encoding", ["gzip", "x-gzip"])
def test_gzip_is_decoded(encoding):
    body = b'{"state": "SUCCESS"}' * 100
    assert read(gzip.compress(body), max_bytes=10_000, encoding=encoding) == body


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS], ids=["zlib-wrapped", "raw"])
def test_deflate_is_decoded_in_both_forms_servers_send(wbits):
    body = b'{"state": "RUNNING"}' * 100
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = compressor.compress(body) + compressor.flush()
    assert read(packed, max_bytes=10_000, encoding="deflate", chunk=7) == body


def test_gzip_of_several_members_is_decoded_whole():
    assert read(gzip.compress(b"abc") + gzip.compress(b"def"), max_bytes=100, encoding="gzip") == b"abcdef"


def test_the_cap_counts_inflated_bytes_and_a_gzip_bomb_costs_memory_near_the_cap():
    bomb = gzip_bomb_body(256 * MiB)  # about 256 KiB on the wire
    cap = 4 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(CrewResponseTooLargeError, match="over 4 MiB"):
            read(bomb, max_bytes=cap, encoding="gzip")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What was held: the kept body (up to the cap), one inflated step and one chunk off the wire.
    assert peak < cap + 2 * INFLATE_STEP + 1 * MiB, peak


def test_an_encoding_that_was_not_asked_for_is_refused():
    with pytest.raises(
        CrewServerError,
        match=r"Content-Encoding 'br', which was not asked for \(Accept-Encoding: gzip, deflate\)",
    ):
        BodyReader(call(), 200, {"Content-Encoding": "br"}, 1000)


def test_a_corrupt_gzip_body_is_a_server_error():
    with pytest.raises(CrewServerError, match="not valid gzip"):
        read(b"\x1f\x8b\x08\x00garbage-garbage", max_bytes=1000, encoding="gzip")


@pytest.mark.parametrize(
    ("size", "text"), [(32 * MiB, "32 MiB"), (1024, "1 KiB"), (1000, "1000 bytes"), (2**30, "1 GiB")]
)
def test_sizes_are_described_as_set(size, text):
    assert describe_size(size) == text


# -- the redirect rule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "location", ["/k-1/status/", f"{BASE}/v2/k-1/status", "https://CREW.example.test:443/x"]
)
def test_a_get_follows_a_redirect_to_the_same_origin(location):
    target = redirect_target(call(), f"{BASE}/k-1/status", 302, location, hops=0)
    assert target.lower().startswith(BASE)


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        ("https://elsewhere.example.test/k-1/status", "another origin (https://elsewhere.example.test:443)"),
        ("http://crew.example.test/k-1/status", "another origin (http://crew.example.test:80)"),
        ("https://crew.example.test:8443/k-1/status", "another origin (https://crew.example.test:8443)"),
    ],
)
def test_a_redirect_to_another_origin_is_refused(location, problem):
    with pytest.raises(
        CrewRedirectError, match="redirect to " + problem.replace("(", r"\(").replace(")", r"\)")
    ) as caught:
        redirect_target(call(), f"{BASE}/k-1/status", 302, location, hops=0)
    assert caught.value.http_status == 302
    assert "Set the connection's host" in str(caught.value)


def test_a_post_is_never_redirected_even_to_the_same_origin():
    with pytest.raises(CrewRedirectError, match="a redirect of a POST"):
        redirect_target(call("POST", "/kickoff"), f"{BASE}/kickoff", 307, f"{BASE}/v2/kickoff", hops=0)


def test_a_redirect_without_location_or_in_a_loop_is_refused():
    with pytest.raises(CrewRedirectError, match="without a Location"):
        redirect_target(call(), f"{BASE}/k-1/status", 301, None, hops=0)
    with pytest.raises(CrewRedirectError, match=f"more than {MAX_REDIRECTS} redirects"):
        redirect_target(call(), f"{BASE}/k-1/status", 302, "/k-1/status", hops=MAX_REDIRECTS)
