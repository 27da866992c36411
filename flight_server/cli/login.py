"""Client side of a login: Basic on Handshake, bearer token back (``icefloe login``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

from flight_server.cli.connect import clean_error


def login_token(location: str, user: str, password: str, tls_root_certs: str | None = None,
                timeout_s: float = 30.0) -> str:
    """The bearer token the server issues for ``user`` (without the ``Bearer `` prefix).

    Raises:
        ValueError: With a message for the user (bad credentials, server unreachable, ...).
    """
    roots = Path(tls_root_certs).read_bytes() if tls_root_certs else None
    client = flight.FlightClient(location, tls_root_certs=roots)
    try:
        _, value = client.authenticate_basic_token(user, password, flight.FlightCallOptions(timeout=timeout_s))
    except flight.FlightUnauthenticatedError:
        raise ValueError("login refused: invalid username or password") from None
    except pa.ArrowNotImplementedError:
        raise ValueError("the server has no logins (it runs without --users): connect without a token") from None
    except (flight.FlightError, pa.ArrowException) as exc:
        raise ValueError(f"login failed: {clean_error(exc, location)}") from None
    finally:
        client.close()
    header = bytes(value).decode("ascii", "replace")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ValueError("the server issued no bearer token")
    return token
