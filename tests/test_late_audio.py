"""Late audio on a published day (issue 57): the late-audio sensor's comparison, its run, and the alert webhook.

The sensor is the shipped one, evaluated on a real instance with the real storage resource (`dg.build_sensor_context`);
its run is the real job's assets with the run config it asked for, on a copy of the sample partition's outputs and
source. The comparison is also run on a real S3 API (moto). The webhook posts go to a real HTTP server on loopback.
The daemon itself, ticking on its own, is `tests/test_unwatched.py`.
"""

from __future__ import annotations

import os
import shutil
import socket

import dagster as dg
import polars as pl
import pytest

from batch_assets.alerts.webhook import post_text
from batch_assets.definitions import all_assets, exports_checks, transcripts_checks
from batch_assets.ingest.late_audio import late_changes, list_versions
from batch_assets.ingest.manifest import build_manifest
from batch_assets.orchestration.late_audio import late_audio_sensor
from batch_assets.settings import reload_settings
from batch_assets.source.identity import ObjectVersion
from batch_assets.storage.resource import SAMPLE_PARTITION

from .conftest import SAMPLE_SOURCE, assert_units_kept, make_resources, tables_of
from .s3_server import S3Server
from .servers import WebhookReceiver

P = SAMPLE_PARTITION
ORIGINAL, LATE, TOUCHED, REMOVED = ("calls/2026/support_call.flac", "late/support_call_again.flac",
                                    "calls/2026/interview.ogg", "meetings/planning.mp3")


@pytest.fixture()
def day(sample_run, tmp_path, lock_dir):
    """A copy of the sample day's source and outputs, published on a real instance of its own."""
    _, storage = sample_run
    shutil.copytree(SAMPLE_SOURCE / P, tmp_path / "source" / P)
    shutil.copytree(storage.storage_url, tmp_path / "storage")
    resources = make_resources(tmp_path / "storage", lock_dir, tmp_path / "source")
    (tmp_path / "home").mkdir()
    with dg.DagsterInstance.local_temp(str(tmp_path / "home")) as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("transcripts", partition=P))
        yield instance, resources, tmp_path / "source" / P


@pytest.fixture()
def webhook(monkeypatch):
    with WebhookReceiver() as receiver:
        monkeypatch.setenv("BATCH_ASSETS_ALERT_WEBHOOK_URL", receiver.url)
        reload_settings()
        yield receiver
    monkeypatch.delenv("BATCH_ASSETS_ALERT_WEBHOOK_URL")
    reload_settings()


def _tick(instance, resources, cursor=None):
    return late_audio_sensor(dg.build_sensor_context(instance=instance, cursor=cursor,
                                                     resources={"storage": resources["storage"]}))


def _deliver(instance, resources):
    from batch_assets.orchestration.alerts import deliver_alerts

    return deliver_alerts(dg.build_sensor_context(instance=instance, resources={"storage": resources["storage"]}))


@pytest.mark.e2e
def test_late_audio_is_transcribed_beside_the_days_unchanged_units_once_per_change(day, webhook):
    instance, resources, folder = day
    storage = resources["storage"]
    before = tables_of(storage)
    first = _tick(instance, resources)
    assert not first.run_requests and "nothing new, changed or gone" in first.skip_reason.skip_message

    (folder / LATE).parent.mkdir()
    shutil.copy(folder / ORIGINAL, folder / LATE)  # a file sent again under another name, after the day's run
    os.utime(folder / TOUCHED)  # the same bytes written again: a new version
    asked = _tick(instance, resources, first.cursor)
    [request] = asked.run_requests
    assert request.partition_key == P
    assert request.run_config["ops"]["gpu_section"]["config"]["units"] == sorted([LATE, TOUCHED])
    assert request.run_config["ops"]["fetched_audio"]["config"]["units"] == sorted([LATE, TOUCHED])
    assert not _tick(instance, resources, asked.cursor).run_requests  # the cursor: asked for once
    assert [r.run_key for r in _tick(instance, resources).run_requests] == [request.run_key]  # a lost cursor: the
    # same run key, which Dagster launches once

    result = dg.materialize([*all_assets, *transcripts_checks, *exports_checks], partition_key=P,
                            resources=resources, instance=instance, run_config=request.run_config, tags=request.tags)
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks)  # units_accounted_for among them: the manifest holds the new unit
    after = tables_of(storage)
    manifest = storage.read_parquet("fetched_audio", P, "manifest")
    ids = dict(zip(manifest["relative_key"], manifest["unit_id"], strict=True))
    assert len(manifest) == 6 and after["transcripts", "units"].height == 6
    assert_units_kept(before, after, drop=("scores_uri", "source_uri"))  # every unit heard before: its rows as they
    # were (but where the source lies: a copy here)
    words = [after["transcripts", "words"].filter(pl.col("unit_id") == ids[k]).drop("unit_id")
             for k in (ORIGINAL, LATE)]
    assert words[0].height > 0 and words[0].equals(words[1])  # the late copy is heard as its original was
    assert not webhook.bodies  # a run that succeeded tells nobody

    nothing = _tick(instance, resources, asked.cursor)
    assert not nothing.run_requests
    os.remove(folder / REMOVED)
    gone = _tick(instance, resources, nothing.cursor)
    assert not gone.run_requests and REMOVED in gone.skip_reason.skip_message
    assert not webhook.bodies  # queued, not posted in the listing's tick (issue 65)
    _deliver(instance, resources)
    [text] = webhook.texts()
    assert P in text and REMOVED in text and "kept" in text and webhook.url not in text
    _tick(instance, resources, gone.cursor)
    _tick(instance, resources)  # a lost cursor: the same message key, queued once
    _deliver(instance, resources)
    assert len(webhook.bodies) == 1  # told once per set of gone objects
    assert tables_of(storage)["transcripts", "units"].height == 6  # its rows stay


@pytest.mark.parametrize("versioning", [None, "Enabled", "Suspended"])
def test_the_listing_tells_new_changed_and_gone_objects_on_s3(versioning):
    """On a real S3 API, on a bucket that never kept versions, keeps them, or kept them and stopped: the manifest's
    identity (HEAD: size, ETag, VersionId) and the listing's (LIST: size and ETag) compare on what both carry, so
    an unchanged object is never taken for a changed one (issue 64: a versioned bucket's units were all
    changed_since_listed, and never listed again); a unit the tables hold unread is asked for again."""
    with S3Server() as s3:
        bucket = f"late-{(versioning or 'off').lower()}"
        client = s3.bucket(bucket, versioning)
        for key in (ORIGINAL, TOUCHED, REMOVED):
            client.upload_file(str(SAMPLE_SOURCE / P / key), bucket, f"rec/{P}/{key}")
        if versioning == "Suspended":
            client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        storage = s3.storage(bucket)
        fs, path = storage.filesystem(f"s3://{bucket}/rec/{P}")
        manifest, _ = build_manifest(fs, path, 7200.0, 4)
        assert manifest["version_id"].is_not_null().all() == bool(versioning), manifest["version_id"]
        published = dict.fromkeys(manifest["unit_id"], "transcribed")
        unchanged = late_changes(P, list_versions(fs, path), manifest, published)
        assert unchanged.listed == 3 and not unchanged.units and not unchanged.gone
        unread = dict(published) | {manifest["unit_id"][0]: "fetch_failed"}
        again = late_changes(P, list_versions(fs, path), manifest, unread)
        assert again.changed == (manifest["relative_key"][0],)  # read again, as a change is
        client.upload_file(str(SAMPLE_SOURCE / P / ORIGINAL), bucket, f"rec/{P}/{LATE}")
        client.upload_file(str(SAMPLE_SOURCE / P / "meetings/standup.wav"), bucket, f"rec/{P}/{TOUCHED}")
        client.delete_object(Bucket=bucket, Key=f"rec/{P}/{REMOVED}")
        changes = late_changes(P, list_versions(fs, path), manifest, published)
        assert (changes.new, changes.changed, changes.gone) == ((LATE,), (TOUCHED,), (REMOVED,))
        client.upload_file(str(SAMPLE_SOURCE / P / TOUCHED), bucket, f"rec/{P}/{TOUCHED}")  # its old bytes again
        assert late_changes(P, list_versions(fs, path), manifest, published).changed == ()


def test_the_webhook_gets_the_text_with_retries_and_never_the_url_in_an_error():
    with WebhookReceiver(answers=[500, 429]) as receiver:
        delivery = post_text(receiver.url, "run abc failed", backoff_s=0.01)
        assert delivery.sent and delivery.attempts == 3 and receiver.bodies == [{"text": "run abc failed"}]
    with WebhookReceiver(answers=[404]) as receiver:
        delivery = post_text(receiver.url, "x", backoff_s=0.01)
        assert not delivery.sent and delivery.attempts == 1 and delivery.error.startswith("HTTP 404")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/hooks/secret-token"
    delivery = post_text(url, "x", timeout_s=1, backoff_s=0.01)
    assert not delivery.sent and delivery.attempts == 3 and "secret-token" not in delivery.error
    assert not post_text("file:///etc/passwd", "x").sent



def test_a_post_never_raises_never_names_its_url_and_keeps_keys_from_the_chat_markup():
    """Issue 65: `post_text` caught HTTPError, URLError and OSError only: a bad status line failed the tick, and an
    InvalidURL (a control character in the URL) carried the URL, Slack's secret, into the tick's error. Object keys
    went raw into messages: `<!channel>` pinged a channel, a newline forged a line."""
    import threading

    with socket.socket() as listener:  # a server that answers each request with a line that is not HTTP
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def garbage() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")

        threading.Thread(target=garbage, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/T0/B0/secret-token"
        delivery = post_text(url, "x", timeout_s=5, attempts=1)
    assert not delivery.sent and "BadStatusLine" in delivery.error and "secret-token" not in delivery.error
    delivery = post_text("http://127.0.0.1:9/hooks/T0/B0/secret-token\n", "x", timeout_s=1, attempts=1)
    assert not delivery.sent and "secret-token" not in delivery.error, delivery
    with WebhookReceiver() as receiver:
        assert post_text(receiver.url, "gone: calls/<!channel>.wav\nbatch_assets: forged & more").sent
    assert receiver.texts() == ["gone: calls/&lt;!channel&gt;.wav batch_assets: forged &amp; more"]


def test_a_manifest_written_before_the_identity_columns_is_read_in_todays_schema(tmp_path):
    """A day listed before issue 64 has one `version` string per object ('mtime_ns …' locally, 'etag "…" version_id
    …' on S3) and no `duration_estimated`: read, it has the identity columns (a file rewritten at the same size is
    still a change to the sensor) and every column a run reads, so a late run can relist it."""
    from fsspec.implementations.local import LocalFileSystem

    from batch_assets.ingest.manifest import read_manifest, relist
    from batch_assets.storage.resource import StorageResource

    folder = tmp_path / "source" / P
    for key in (ORIGINAL, TOUCHED):
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_SOURCE / P / key, folder / key)
    fs = LocalFileSystem()
    today, _ = build_manifest(fs, str(folder), 7200.0, 2)
    legacy = today.drop("etag", "version_id", "mtime_ns", "duration_estimated").with_columns(
        pl.format("mtime_ns {}", today["mtime_ns"]).alias("version"))
    storage, now = (StorageResource(source_url=str(tmp_path / "source"), storage_url=str(tmp_path / name))
                    for name in ("before", "now"))
    storage.write_published(legacy, "fetched_audio", P, "manifest")
    now.write_published(today, "fetched_audio", P, "manifest")  # as published today (ms times, null reasons)
    read = read_manifest(storage, P)
    assert read.equals(read_manifest(now, P)), (read, today)
    s3_row = ObjectVersion.of_legacy(10, 'etag "9b2cf535f27731c974343645a3985328-2" version_id 3HL4kqtJ').columns()
    assert s3_row == {"bytes": 10, "etag": "9b2cf535f27731c974343645a3985328-2", "version_id": "3HL4kqtJ",
                      "mtime_ns": None}
    published = dict.fromkeys(read["unit_id"], "transcribed")
    os.utime(folder / TOUCHED, ns=(1, 1))  # the same bytes written again: another mtime, the same size
    assert late_changes(P, list_versions(fs, str(folder)), read, published).changed == (TOUCHED,)
    manifest, _ = relist(fs, str(folder), read, [TOUCHED], 7200.0, 2)
    assert manifest.height == 2 and manifest.columns == today.columns


def test_relisting_some_keys_keeps_every_other_row_and_loses_no_key_asked_for(tmp_path):
    """What a late run's `fetched_audio` does: the keys asked for are described again (a new one, a changed one),
    one that is gone by then gets a `fetch_failed` row saying so, and the other rows are the manifest's own."""
    from fsspec.implementations.local import LocalFileSystem

    from batch_assets.ingest.manifest import relist

    folder = tmp_path / P
    for key in (ORIGINAL, TOUCHED, REMOVED):
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_SOURCE / P / key, folder / key)
    fs = LocalFileSystem()
    previous, _ = build_manifest(fs, str(folder), 7200.0, 2)
    (folder / LATE).parent.mkdir()
    shutil.copy(SAMPLE_SOURCE / P / ORIGINAL, folder / LATE)
    shutil.copy(SAMPLE_SOURCE / P / "meetings/standup.wav", folder / TOUCHED)  # other bytes under the same key
    manifest, _ = relist(fs, str(folder), previous, [LATE, TOUCHED, "late/gone_already.wav"], 7200.0, 2)
    assert manifest["relative_key"].to_list() == sorted([ORIGINAL, TOUCHED, REMOVED, LATE, "late/gone_already.wav"])
    rows = {row["relative_key"]: row for row in manifest.iter_rows(named=True)}
    before = {row["relative_key"]: row for row in previous.iter_rows(named=True)}
    assert rows[ORIGINAL] == before[ORIGINAL] and rows[REMOVED] == before[REMOVED]
    assert rows[TOUCHED]["bytes"] == (folder / TOUCHED).stat().st_size != before[TOUCHED]["bytes"]
    assert rows[LATE]["result_class"] == "ok" and rows[LATE]["duration_s"] == rows[ORIGINAL]["duration_s"]
    assert rows["late/gone_already.wav"]["result_class"] == "fetch_failed"
    assert "no longer in the source" in rows["late/gone_already.wav"]["reason"]


def test_the_outbox_survives_a_webhook_that_never_answers_and_then_sends_each_message_once(tmp_path):
    """Issue 65: the sensors queue their messages (`alerts/outbox.py`) and `deliver_alerts` posts them, one short
    try each within its budget. A webhook that accepts connections and never answers costs one try a tick (the
    rest wait, in order); once it answers, each message is sent once, a message queued twice once; a 4xx is kept
    aside, never tried again."""
    import time

    from batch_assets.alerts.outbox import REFUSED, deliver, queue, queued

    storage = make_resources(tmp_path / "storage", tmp_path / "locks")["storage"]
    with WebhookReceiver() as hook:
        hook.hanging.set()
        assert queue(storage, "run-failed a", "first") and not queue(storage, "run-failed a", "first, again")
        assert queue(storage, "gone 2026-01-15 k", "second <!channel>", now=time.time() + 1)
        assert [q.text for q in queued(storage)] == ["first", "second <!channel>"]
        started = time.monotonic()
        report = deliver(storage, hook.url, timeout_s=0.5)
        assert time.monotonic() - started < 3 and report.left == 2 and not report.sent and hook.held == 1, report
        assert "secret-token" not in report.failed[0] and queued(storage)[0].tries == 1
        hook.hanging.clear()
        assert deliver(storage, hook.url).sent == ["first", "second <!channel>"]
        assert not deliver(storage, hook.url).sent and not queued(storage)
    assert hook.texts() == ["first", "second &lt;!channel&gt;"]  # each once, in order, made safe for the chat
    with WebhookReceiver(answers=[404]) as refusing:
        queue(storage, "check-failed b", "third")
        report = deliver(storage, refusing.url)
        assert report.refused and not queued(storage) and not refusing.bodies
    fs, path = storage.filesystem(storage.url(REFUSED))
    assert len(fs.find(path)) == 1  # kept aside, not lost
