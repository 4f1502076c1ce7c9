"""Source objects on the buckets users have (issue 64), read as the listing and the GPU step read them.

A real S3 API (moto on loopback, behind the test proxy where a fault is wanted): versioning never enabled, on, and
suspended; a multipart upload (its ETag is no MD5); an SSE-S3 object; ETags that are not the MD5 of the bytes, as
SSE-KMS and SSE-C objects' are (moto's stay the MD5, so the proxy answers others); a storage outage of a few
seconds during the GPU step's read. Each object is listed (`build_manifest`), planned (`prepare_flights`) and read
and decoded as the GPU step does (`flight_source`).
"""

from __future__ import annotations

import hashlib
import io

import boto3.s3.transfer
import numpy as np
import polars as pl
import pytest
import soundfile as sf

from batch_assets.ingest.late_audio import late_changes, list_versions
from batch_assets.ingest.manifest import build_manifest
from batch_assets.ingest.prepare import prepare_flights
from batch_assets.source.fetch import RetryPolicy, retries_of_run
from batch_assets.source.flight_audio import flight_source

from .s3_server import S3Server

DAY = "2026-03-01"
MULTIPART = boto3.s3.transfer.TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)


def _wav(seconds: float, seed: int) -> bytes:
    buffer = io.BytesIO()
    noise = 0.1 * np.random.default_rng(seed).standard_normal(int(16000 * seconds)).astype(np.float32)
    sf.write(buffer, noise, 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _padded(wav: bytes, padding: int) -> bytes:
    """`wav` with a JUNK chunk of `padding` bytes before its data (what some recorders reserve for later metadata):
    a multipart-sized object that decodes in no time."""
    fmt_end = 12 + 8 + int.from_bytes(wav[16:20], "little")
    body = wav[12:fmt_end] + b"JUNK" + padding.to_bytes(4, "little") + bytes(padding) + wav[fmt_end:]
    return b"RIFF" + (4 + len(body)).to_bytes(4, "little") + b"WAVE" + body


OBJECTS = {"plain.wav": _wav(2.0, 1), "multipart.wav": _padded(_wav(1.0, 2), 6 * 2**20), "sse-s3.wav": _wav(1.5, 3)}


def _upload(client, bucket: str, key: str, data: bytes) -> None:
    full = f"src/{DAY}/{key}"
    if key.startswith("multipart"):
        client.upload_fileobj(io.BytesIO(data), bucket, full, Config=MULTIPART)
    elif key.startswith("sse"):
        client.put_object(Bucket=bucket, Key=full, Body=data, ServerSideEncryption="AES256")
    else:
        client.put_object(Bucket=bucket, Key=full, Body=data)


def _read_day(storage, retries: RetryPolicy | None = None) -> tuple[pl.DataFrame, dict]:
    """The day's manifest, and each unit's decoded piece as the GPU step reads it."""
    fs, path = storage.filesystem(storage.source_partition_url(DAY))
    fs.invalidate_cache()
    manifest, _ = build_manifest(fs, path, 7200.0, 4)
    return manifest, _pieces(storage, manifest, retries)


def _pieces(storage, manifest: pl.DataFrame, retries: RetryPolicy | None = None) -> dict:
    plan, flights = prepare_flights(manifest, budget_s=1800.0, max_units=8)
    source = flight_source(plan, manifest, storage.filesystem, 4, retries=retries or RetryPolicy(2, 0.05))
    pieces = {}
    for flight_id in flights["flight_id"]:
        pieces |= source.load(flight_id).pieces
    keys = dict(zip(manifest["unit_id"], manifest["relative_key"], strict=True))
    return {keys[uid]: piece for uid, piece in pieces.items()}


@pytest.mark.parametrize("versioning", [None, "Enabled", "Suspended"])
def test_every_unit_is_read_as_listed_whether_the_bucket_keeps_versions_or_not(versioning):
    """Issue 64: on a versioned bucket every unit was `changed_since_listed` (the listing recorded the ETag, the read
    saw a VersionId too, the strings never matched). Now every object is read whole, as listed, on every kind of
    bucket; multipart and SSE-S3 objects too. An object replaced after it was listed: a bucket that keeps its
    listed version reads that version (the late-audio sensor lists the newer one); one that does not says so."""
    with S3Server() as s3:
        bucket = f"source-{(versioning or 'never').lower()}"
        client = s3.bucket(bucket, versioning)
        objects = dict(OBJECTS)
        for key, data in objects.items():
            _upload(client, bucket, key, data)
        if versioning == "Suspended":
            client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
            objects["after-suspension.wav"] = _wav(1.0, 4)
            _upload(client, bucket, "after-suspension.wav", objects["after-suspension.wav"])
        storage = s3.storage(bucket, source="src")
        manifest, pieces = _read_day(storage)
        assert set(manifest["result_class"]) == {"ok"}, manifest.select("relative_key", "reason")
        rows = {row["relative_key"]: row for row in manifest.iter_rows(named=True)}
        assert "-" in rows["multipart.wav"]["etag"]  # a multipart ETag: not the MD5 of the bytes
        kept = {key for key, row in rows.items() if row["version_id"] is not None}
        assert kept == ({"plain.wav", "multipart.wav", "sse-s3.wav"} if versioning else set())
        for key, piece in pieces.items():
            assert piece.problem is None and piece.sha256 == hashlib.sha256(objects[key]).hexdigest(), (key, piece)
        assert pieces["multipart.wav"].num_samples == 16000 and rows["multipart.wav"]["probe_bytes"] < 65536
        late = late_changes(DAY, list_versions(*storage.filesystem(storage.source_partition_url(DAY))), manifest,
                            dict.fromkeys(manifest["unit_id"], "transcribed"))
        assert not late.units and not late.gone  # the sensor's listing agrees with the manifest

        _upload(client, bucket, "plain.wav", _wav(2.0, 9))  # replaced after it was listed
        replaced = _pieces(storage, manifest)["plain.wav"]
        versions = client.list_object_versions(Bucket=bucket, Prefix=f"src/{DAY}/plain.wav").get("Versions", [])
        if rows["plain.wav"]["version_id"] in {v["VersionId"] for v in versions}:  # the listed version is still kept:
            # read, the same bytes (a suspended bucket may replace it: moto does, AWS keeps it)
            assert replaced.problem is None and replaced.sha256 == hashlib.sha256(objects["plain.wav"]).hexdigest()
        else:
            assert replaced.problem is not None and replaced.problem[0] == "changed_since_listed", replaced


def test_etags_that_are_not_md5s_are_never_taken_for_one():
    """SSE-KMS and SSE-C objects have ETags of 32 hex digits that are not the MD5 of their bytes (AWS documents
    this; moto's stay the MD5, so the proxy answers others and maps `If-Match` back). Before issue 64 the read
    compared them with the MD5 of what it read and refused every object as "changed while read". Now the ETag is
    an opaque token: every object is read, the sensor's listing agrees, and a replaced object is still caught."""
    with S3Server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="opaque-etags")
        for key in ("plain.wav", "sse-s3.wav"):
            _upload(client, "opaque-etags", key, OBJECTS[key])
        s3.proxy.opaque_etags = True
        storage = s3.storage("opaque-etags", faulty=True, source="src")
        manifest, pieces = _read_day(storage)
        for row in manifest.iter_rows(named=True):
            assert row["etag"] != hashlib.md5(OBJECTS[row["relative_key"]]).hexdigest() and len(row["etag"]) == 32
        assert {key: p.problem for key, p in pieces.items()} == {"plain.wav": None, "sse-s3.wav": None}
        late = late_changes(DAY, list_versions(*storage.filesystem(storage.source_partition_url(DAY))), manifest,
                            dict.fromkeys(manifest["unit_id"], "transcribed"))
        assert not late.units
        _upload(client, "opaque-etags", "plain.wav", _wav(2.0, 9))
        replaced = _pieces(storage, manifest)["plain.wav"]
        assert replaced.problem is not None and replaced.problem[0] == "changed_since_listed", replaced


@pytest.mark.slow  # the client's own backoff within each attempt: about 10 s in all
def test_a_storage_outage_during_the_gpu_steps_read_is_retried_with_the_runs_policy():
    """A storage outage (every connection dropped unanswered) begins at the GPU step's first GET of an object. Before
    issue 64 the step read with a fixed policy whatever the run said; now it reads with `fetched_audio`'s
    (`retries_of_run`). botocore's own retries are off here (`s3_max_attempts=1`), but the client stack still retries
    a dropped connection within each of our attempts (20 requests here, over about 2 s): measured first, against an
    outage that does not end, then an outage half as long again outlasts one attempt and not the run's five."""
    with S3Server() as s3:
        client = s3.bucket("outage")
        _upload(client, "outage", "plain.wav", OBJECTS["plain.wav"])
        storage = s3.storage("outage", faulty=True, source="src").model_copy(update={"s3_max_attempts": 1})
        manifest, _ = _read_day(storage)
        length = {"requests": 10**6}

        def outage(key: str) -> None:
            if key.endswith("plain.wav") and not s3.proxy.refused:
                s3.proxy.refuse_next = length["requests"]

        s3.proxy.before_get = outage
        once = _pieces(storage, manifest, RetryPolicy(attempts=1, base_delay_s=0.2))["plain.wav"]
        assert once.problem is not None and once.problem[0] == "fetch_failed", once
        per_attempt = s3.proxy.refused
        length["requests"] = per_attempt + per_attempt // 2  # longer than one attempt lasts
        s3.proxy.refuse_next, s3.proxy.refused = 0, 0  # the next GET starts it
        policy = retries_of_run({"ops": {"fetched_audio": {"config": {"retry_attempts": 5,
                                                                      "retry_base_delay_seconds": 0.2}}}})
        assert policy == RetryPolicy(5, 0.2) and retries_of_run({}) == RetryPolicy()
        survived = _pieces(storage, manifest, policy)["plain.wav"]
        assert survived.problem is None and survived.sha256 == hashlib.sha256(OBJECTS["plain.wav"]).hexdigest()
        assert s3.proxy.refused == length["requests"], (s3.proxy.refused, per_attempt)  # it met the whole outage
