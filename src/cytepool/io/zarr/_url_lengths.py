"""The lengths of remote stores' request URLs: obstore's HTTP library refuses URLs beyond
:data:`MAX_URL_LENGTH` characters, and obstore then panics, so a store refuses them first."""

from __future__ import annotations

from urllib.parse import quote

__all__ = ["CLIENT_ROOM", "MAX_URL_LENGTH", "abridged", "longest_url", "too_long_why", "url_length"]

MAX_URL_LENGTH = 65_534
"""The most characters of a request's URL: obstore's HTTP library refuses a longer one, and
obstore then panics (a ``RustPanic``, not an error), so a longer URL is refused before it."""

CLIENT_ROOM = 4_096
"""Characters left, below :data:`MAX_URL_LENGTH`, for what an s3, gs or az client puts in its
request URLs beside the store's URL and the key (an endpoint, a bucket's host, a signature)."""


def url_length(url: str, key: str) -> int:
    """At least the length of the URL of a request for ``key`` of the store at ``url``: every
    character of the path counted percent-encoded, as if it were no URL character."""
    base, question, query = url.partition("?")
    return len(quote(f"{base}/{key}", safe="/:")) + len(question + query)


def longest_url(url: str) -> int:
    """The most characters :func:`url_length` may count for a store at ``url``."""
    http = url.split("://", 1)[0].lower() in ("http", "https")
    return MAX_URL_LENGTH if http else MAX_URL_LENGTH - CLIENT_ROOM


def abridged(text: str, most: int = 200) -> str:
    """``text``, its middle left out (``…``) if it is longer than ``most`` characters."""
    return text if len(text) <= most else f"{text[: most - 50]}…{text[-49:]}"


def too_long_why(url: str, key: str, subject: str = "its URL") -> str:
    """Why the URL of ``key`` at ``url`` cannot be requested (``subject`` names that URL)."""
    most = longest_url(url)
    bound = (
        "MAX_URL_LENGTH" if most == MAX_URL_LENGTH else "MAX_URL_LENGTH, less room for the client"
    )
    return (
        f"{subject} would have {url_length(url, key)} characters (percent-encoded), more than "
        f"the {most} a request can carry ({bound})"
    )
