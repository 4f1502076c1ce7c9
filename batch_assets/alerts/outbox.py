"""Alerts queued in storage and delivered by a sensor of their own: no post ever sits on another sensor's path.

Why: a webhook that accepts connections and never answers held the late-audio sensor past Dagster's 60 s tick
timeout (three tries of 10 s per message, inside its listing loop): its cursor was never saved, no late run was ever
asked for, and a slow webhook got the same message every tick. Now a sensor with something to tell queues it
(`queue`: one small object under `{storage}/alerts/outbox/`, named by the message's key) and goes on at once; the
`deliver_alerts` sensor (`orchestration/alerts.py`) posts what is queued, oldest first, one short try each
(`TRY_TIMEOUT_S`), within `DELIVERY_BUDGET_S` a tick; a try that gets no answer ends the tick's posting (the webhook
is down or slow: one timeout a tick, not one a message), one the webhook answers with an error (a 5xx, a 429) waits
for the next tick while the messages after it are tried. A dead webhook leaves the outbox as it is and the next tick
tries again, oldest first; once it answers, each message is sent once. A message queued twice, or again after it was
sent, is one message: each one sent leaves its record under `alerts/sent/` (a message sent whose record could not be
written is sent again: at least once, never lost). A message that an HTTP 4xx other than 429 refuses goes to
`alerts/refused/` (the URL or the body is wrong: the same try again changes nothing). No Dagster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time

from batch_assets.alerts.webhook import post_text
from batch_assets.storage.paths import remove_path

OUTBOX, SENT, REFUSED = "alerts/outbox", "alerts/sent", "alerts/refused"
TRY_TIMEOUT_S = 5.0  # one try per message and tick: a dead webhook costs this, once per tick, not per message
DELIVERY_BUDGET_S = 20.0  # a tick's posting, under Dagster's 60 s sensor timeout with room for the listing
DELIVERY_INTERVAL_S = 15  # between `deliver_alerts` ticks: a queued message waits about this long (a listing each)


@dataclasses.dataclass(frozen=True)
class Queued:
    key: str  # what makes two messages one (a run id, a day and its set of gone objects)
    text: str
    queued_unix: float
    tries: int = 0
    error: str | None = None  # the last try's (never naming the URL: `post_text`)


@dataclasses.dataclass
class DeliveryReport:
    sent: list[str] = dataclasses.field(default_factory=list)  # texts
    failed: list[str] = dataclasses.field(default_factory=list)  # "error: text"
    refused: list[str] = dataclasses.field(default_factory=list)
    left: int = 0  # still queued after the tick


def _url(storage, folder: str, key: str) -> str:
    return storage.url(folder, f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json")


def queue(storage, key: str, text: str, now: float | None = None) -> bool:
    """Queue `text` under `key` unless a message of that key is queued, sent or refused already; True when queued
    now."""
    for folder in (OUTBOX, SENT, REFUSED):
        fs, path = storage.filesystem(_url(storage, folder, key))
        if fs.exists(path):
            return False
    message = Queued(key, text, time.time() if now is None else now)
    storage.write_bytes(_url(storage, OUTBOX, key), json.dumps(dataclasses.asdict(message)).encode())
    return True


def queued(storage) -> list[Queued]:
    """The outbox, oldest first."""
    found = [Queued(**record) for record in storage.read_json_files(storage.url(OUTBOX))]
    return sorted(found, key=lambda q: (q.queued_unix, q.key))


def deliver(storage, url: str, budget_s: float = DELIVERY_BUDGET_S, timeout_s: float = TRY_TIMEOUT_S) -> DeliveryReport:
    """Post the queued messages to `url`, oldest first, one try each, until `budget_s` is spent or a try gets no
    answer (the webhook is down or slow: the rest wait for the next tick, in their order)."""
    report, started = DeliveryReport(), time.monotonic()
    waiting = queued(storage)
    for i, message in enumerate(waiting):
        if time.monotonic() - started > budget_s:
            report.left = len(waiting) - i
            break
        delivery = post_text(url, message.text, timeout_s=timeout_s, attempts=1)
        here = _url(storage, OUTBOX, message.key)
        tried = json.dumps(dataclasses.asdict(dataclasses.replace(message, tries=message.tries + 1,
                                                                  error=delivery.error))).encode()
        if delivery.sent or delivery.refused:
            storage.write_bytes(_url(storage, SENT if delivery.sent else REFUSED, message.key), tried)
            if delivery.refused:
                report.refused.append(f"{delivery.error}: {message.text}")
            else:
                report.sent.append(message.text)
            fs, path = storage.filesystem(here)
            with contextlib.suppress(FileNotFoundError):
                remove_path(fs, path)
            continue
        storage.write_bytes(here, tried)
        report.failed.append(f"{delivery.error}: {message.text}")
        if not delivery.answered:  # down or slow: the rest wait for the next tick, in their order
            report.left = len(waiting) - i
            break
        report.left += 1  # it answered (a 5xx, a 429): this one waits, the next ones are tried
    return report
