"""What both transports share: the body cap (after the library's decompression), over real HTTP from a
fixed-answer server, and the redirect rule on its own.

The same limits over real HTTP, through the sync and the async path, are in
tests/hooks/test_hostile_services.py.
"""

from __future__ import annotations

import asyncio
import gzip
import http.server
import importlib.util
import threading
import tracemalloc
import zlib

import pytest
import requests

from airflow_provider_crew._compat import AirflowFailException
from airflow_provider_crew.connection import CrewConnectionConfig
from airflow_provider_crew.exceptions import (
    CrewConfigurationError,
    CrewOutcomeUnknownError,
    CrewRedirectError,
    CrewResponseTooLargeError,
    CrewServerError,
)
from airflow_provider_crew.hooks.client.request import Call, post_call
from airflow_provider_crew.hooks.client.response import Came, Response, TransportFailure
from airflow_provider_crew.hooks.client.transport import (
    MAX_REDIRECTS,
    AsyncTransport,
    Limits,
    SyncTransport,
    describe_size,
    redirect_target,
)
from airflow_provider_crew.hooks.loop_connection import shared_session
from airflow_provider_crew.testing.faults import gzip_bomb_body
from tests.conftest import close_shared_sessions

BASE = "https://crew.example.test"
CONFIG_FOR_POSTS = CrewConnectionConfig(base_url=BASE, token="transport-token-1")
MiB = 1024 * 1024


def call(method: str = "GET", path: str = "/k-1/status", consequence: str = "", base: str = BASE) -> Call:
    return Call(method, f"{base}{path}", f"{method} {path}", headers={}, consequence=consequence)


class FixedAnswer(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the server's ``answer`` (headers, body): bodies the local crew
    service has no fault for (every encoding form, a corrupt gzip, an encoding not asked for)."""

    def do_GET(self) -> None:
        headers, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(200)
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FixedAnswer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


async def _send_async(c: Call, limits: Limits) -> Response | TransportFailure:
    try:
        return await AsyncTransport(shared_session()).send(c, limits)
    finally:
        await close_shared_sessions()


@pytest.fixture(params=["sync", "async"])
def read(request, server):
    """Serve ``body`` with ``encoding`` and read it through the sync or the async transport."""

    def run(body: bytes, max_bytes: int, encoding: str | None = None, **headers: str) -> bytes:
        server.answer = ({"Content-Encoding": encoding, **headers} if encoding else headers, body)
        c = call(base=f"http://127.0.0.1:{server.server_address[1]}", consequence=CONSEQUENCE)
        limits = Limits(connect_timeout=5, read_timeout=5, total=10, max_bytes=max_bytes)
        if request.param == "sync":
            with requests.Session() as session:
                outcome = SyncTransport(session).send(c, limits)
        else:
            outcome = asyncio.run(_send_async(c, limits))
        if isinstance(outcome, TransportFailure):
            raise AssertionError(outcome)
        return outcome.content

    return run


CONSEQUENCE = "Crew execution k-1 may still be running."


# -- the body cap, over real HTTP through both transports ------------------------------------------


def test_a_body_up_to_the_cap_is_read_whole(read):
    assert read(b"x" * 1000, max_bytes=1000) == b"x" * 1000


def test_a_body_over_the_cap_fails_naming_endpoint_cap_setting_and_consequence(read):
    with pytest.raises(CrewResponseTooLargeError) as caught:
        read(gzip.compress(b"x" * 1001), max_bytes=1000, encoding="gzip")  # no honest length: read to the cap

    message = str(caught.value)
    assert message.startswith(
        "GET /k-1/status answered with a body over 1000 bytes (counted after decompression)"
    )
    assert (
        "raise 'Max response size (bytes)' (extra 'max_response_bytes') of the connection, now 1000."
        in message
    )
    assert "not repeated" in message
    assert message.endswith(CONSEQUENCE)
    assert (caught.value.endpoint, caught.value.limit) == ("GET /k-1/status", 1000)
    # A configuration error to the waits: polling again cannot make the body smaller.
    assert isinstance(caught.value, CrewConfigurationError)


def test_an_honest_content_length_over_the_cap_fails(read):
    with pytest.raises(CrewResponseTooLargeError, match="over 1 KiB"):
        read(b"x" * 1025, max_bytes=1024)


def test_gzip_is_decoded(read):
    body = b'{"state": "SUCCESS"}' * 100
    assert read(gzip.compress(body), max_bytes=10_000, encoding="gzip") == body


@pytest.mark.parametrize("wbits", [zlib.MAX_WBITS, -zlib.MAX_WBITS], ids=["zlib-wrapped", "raw"])
def test_deflate_is_decoded_in_both_forms_servers_send(read, wbits):
    body = b'{"state": "RUNNING"}' * 100
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    packed = compressor.compress(body) + compressor.flush()
    assert read(packed, max_bytes=10_000, encoding="deflate") == body


def test_gzip_of_several_members_is_decoded_whole(read):
    assert read(gzip.compress(b"abc") + gzip.compress(b"def"), max_bytes=100, encoding="gzip") == b"abcdef"


def test_the_cap_counts_inflated_bytes_and_a_gzip_bomb_costs_memory_near_the_cap(read):
    bomb = gzip_bomb_body(256 * MiB)  # about 256 KiB on the wire
    cap = 4 * MiB
    tracemalloc.start()
    try:
        with pytest.raises(CrewResponseTooLargeError, match="over 4 MiB"):
            read(bomb, max_bytes=cap, encoding="gzip")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What was held: the kept body (up to the cap), the bomb itself (served from this process) and
    # the pieces the library inflated at a time; never the 256 MiB.
    assert peak < cap + len(bomb) + 4 * MiB, peak


@pytest.mark.parametrize("encoding", ["br", "x-gzip"])
def test_an_encoding_that_was_not_asked_for_is_refused(read, encoding, request):
    refused = pytest.raises(
        CrewServerError,
        match=rf"Content-Encoding '{encoding}', which was not asked for \(Accept-Encoding: gzip, deflate\)",
    )
    brotli = importlib.util.find_spec("brotli") or importlib.util.find_spec("brotlicffi")
    if encoding == "br" and "async" in request.node.callspec.id and not brotli:
        # aiohttp refuses brotli itself, in its parser, when Brotli is not installed: a failed attempt.
        refused = pytest.raises(AssertionError, match=r"Can not decode content-encoding: brotli \(br\)")
    with refused:
        read(b"\x0b\x02\x80{}\x03", max_bytes=1000, encoding=encoding)


def test_a_kickoff_answered_200_in_an_encoding_not_asked_for_is_an_unknown_outcome(server):
    """The service may have started an execution whose id cannot be read: never sent again."""
    server.answer = ({"Content-Encoding": "br"}, b"\x0b\x02\x80{}\x03")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    kickoff = post_call(
        CONFIG_FOR_POSTS.model_copy(update={"base_url": base}), "/kickoff", {}, if_unknown="it ran"
    )
    limits = Limits(connect_timeout=5, read_timeout=5, total=10, max_bytes=1000)
    with requests.Session() as session, pytest.raises(CrewOutcomeUnknownError) as caught:
        SyncTransport(session).send(kickoff, limits)
    message = str(caught.value)
    assert (
        "outcome is unknown (it answered 200 with Content-Encoding 'br', which was not asked for" in message
    )
    assert "; it ran." in message
    assert isinstance(caught.value, AirflowFailException)  # no Airflow retry sends it again


def _self_signed(folder) -> tuple[str, str]:
    """A certificate and key for 127.0.0.1, written under ``folder``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)


@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")
@pytest.mark.parametrize("verify_tls", [False, True])
def test_tls_after_the_request_was_sent_is_an_unknown_outcome_and_a_refused_certificate_is_not(
    tmp_path, verify_tls
):
    """A TLS server that reads the whole POST, then answers with a corrupt TLS record: the service
    may have acted. With verification on, the self-signed certificate is refused in the handshake,
    before anything is sent."""
    import os
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*_self_signed(tmp_path))
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        raw, _ = listener.accept()
        try:
            tls = context.wrap_socket(raw, server_side=True)
            data = b""
            while b"\r\n\r\n" not in data:
                data += tls.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            while len(body) < length:
                body += tls.recv(65536)
            received.append(head.split(b" ")[1])
            os.write(
                tls.fileno(), b"\x17\x03\x03\x00\x20" + b"\x00" * 32
            )  # application data that fails its MAC
        except (ssl.SSLError, OSError):
            pass  # the client refused the certificate
        finally:
            raw.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    base = f"https://127.0.0.1:{listener.getsockname()[1]}"
    kickoff = post_call(
        CONFIG_FOR_POSTS.model_copy(update={"base_url": base}), "/kickoff", {}, if_unknown="it ran"
    )
    limits = Limits(connect_timeout=5, read_timeout=5, total=10, max_bytes=1000, verify_tls=verify_tls)
    with requests.Session() as session:
        outcome = SyncTransport(session).send(kickoff, limits)
    thread.join(timeout=10)
    listener.close()

    assert isinstance(outcome, TransportFailure), outcome
    if verify_tls:
        assert outcome.came is Came.REFUSED and received == [], outcome
    else:
        assert outcome.came is Came.LOST and received == [b"/kickoff"], outcome
        assert "SSLError" in outcome.reason


@pytest.mark.parametrize("transport", ["sync", "async"])
def test_a_corrupt_gzip_body_is_a_failed_attempt_that_may_have_been_acted_on(server, transport):
    server.answer = ({"Content-Encoding": "gzip"}, b"\x1f\x8b\x08\x00garbage-garbage")
    c = call(base=f"http://127.0.0.1:{server.server_address[1]}")
    limits = Limits(connect_timeout=5, read_timeout=5, total=10, max_bytes=1000)
    if transport == "sync":
        with requests.Session() as session:
            outcome = SyncTransport(session).send(c, limits)
    else:
        outcome = asyncio.run(_send_async(c, limits))

    # A GET is read again (a failed poll); a POST's outcome is unknown, so it is never repeated.
    assert isinstance(outcome, TransportFailure) and outcome.came is Came.LOST, outcome


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
    assert "Set 'Crew base URL' (the host) of the connection to the address" in str(caught.value)


def test_a_post_is_never_redirected_even_to_the_same_origin():
    with pytest.raises(CrewRedirectError, match="a redirect of a POST"):
        redirect_target(call("POST", "/kickoff"), f"{BASE}/kickoff", 307, f"{BASE}/v2/kickoff", hops=0)


def test_a_redirect_without_location_or_in_a_loop_is_refused():
    with pytest.raises(CrewRedirectError, match="without a Location"):
        redirect_target(call(), f"{BASE}/k-1/status", 301, None, hops=0)
    with pytest.raises(CrewRedirectError, match=f"more than {MAX_REDIRECTS} redirects"):
        redirect_target(call(), f"{BASE}/k-1/status", 302, "/k-1/status", hops=MAX_REDIRECTS)
