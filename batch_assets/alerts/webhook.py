"""Post one alert as `{"text": ...}` to an incoming webhook: Slack's, a Teams workflow's, most chat tools'.

Why this and not a chat SDK: every tool an operator is likely to use accepts this body on an incoming-webhook URL,
which needs no token, no extra dependency and no scopes; `dagster-slack` would add a client and a bot token for the
same message. The URL is a secret (it lets anyone post): it is never logged, never put in a message and never in an
error (`Delivery.error` names what failed, not where). A post is tried `attempts` times with a timeout and a
backoff (a 4xx other than 429 is not retried: the URL or the body is wrong), and never raises, whatever the URL or
the server does (a bad status line, a URL with a control character): whoever calls it (a sensor, never a run) logs
the outcome and goes on. The text is made safe for the chat (`safe_text`: control characters removed, so an object
key holding a newline cannot forge a line; Slack's `&`, `<` and `>` escaped, so a key holding `<!channel>` pings
nobody). No Dagster.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT_S = 10.0
ATTEMPTS = 3
BACKOFF_S = 1.0
MAX_TEXT = 3000  # Slack shows up to 40,000 characters; a message longer than a screen is not read


@dataclasses.dataclass(frozen=True)
class Delivery:
    """What a post did: sent or not, after how many attempts, and why not (never naming the URL)."""

    sent: bool
    attempts: int
    error: str | None = None
    refused: bool = False  # an HTTP 4xx other than 429: trying the same body again changes nothing
    answered: bool = False  # the webhook answered (an HTTP error): it is up, whatever this message met


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


def plain_line(text: str) -> str:
    """`text` on one line: each run of control characters (newlines among them) becomes one space."""
    return _CONTROL.sub(" ", text).strip()


def safe_text(text: str) -> str:
    """`plain_line`, with Slack's three control characters escaped (`&`, `<`, `>`: its mentions and links)."""
    return plain_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def post_text(url: str, text: str, timeout_s: float = TIMEOUT_S, attempts: int = ATTEMPTS,
              backoff_s: float = BACKOFF_S) -> Delivery:
    """POST `{"text": safe_text(text)}` (cut to `MAX_TEXT` characters) to `url` as JSON."""
    if not url.lower().startswith(("https://", "http://")):
        return Delivery(False, 0, "not an http(s) URL: set BATCH_ASSETS_ALERT_WEBHOOK_URL to the webhook's https://…")
    text = safe_text(text)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT - 1] + "…"
    body = json.dumps({"text": text}).encode()
    error, answered = None, False
    for attempt in range(1, attempts + 1):
        try:
            request = urllib.request.Request(url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (the operator's URL)
                response.read()
            return Delivery(True, attempt)
        except urllib.error.HTTPError as failure:
            error, answered = f"HTTP {failure.code} {failure.reason}", True
            if 400 <= failure.code < 500 and failure.code != 429:
                return Delivery(False, attempt, error, refused=True, answered=True)
        except (urllib.error.URLError, OSError) as failure:  # refused, unreachable, timed out
            reason = getattr(failure, "reason", failure)
            error = _without(url, f"{type(failure).__name__}: {reason}")
        except Exception as failure:  # noqa: BLE001 - a bad status line, an incomplete read, an invalid URL: never
            # raised to the sensor, and never its text, which may hold the URL (Slack's secret is its path)
            error = f"{type(failure).__name__} (its message is not shown: it may hold the URL)"
        if attempt < attempts:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    return Delivery(False, attempts, error, answered=answered)


def _without(url: str, said: str) -> str:
    """`said` with the URL, and its path, left out."""
    path = urllib.parse.urlsplit(url).path if url else ""
    for secret in (url, path):
        if secret and secret != "/":
            said = said.replace(secret, "<webhook URL>")
    return said
