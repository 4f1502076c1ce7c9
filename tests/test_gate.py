"""The gate passes identical runs and fails each kind of deliberately altered candidate."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import polars as pl
import pytest

from batch_assets.gate.compare import gate
from batch_assets.gate.diarization_error import read_truth
from batch_assets.storage.resource import REPO_ROOT, StorageResource
from batch_assets.storage.resource import SAMPLE_PARTITION as P

pytestmark = pytest.mark.e2e  # every test here runs the job, a server or a deployment


@pytest.fixture()
def runs(sample_run, tmp_path):
    _, storage = sample_run
    baseline = tmp_path / "baseline"
    candidate = tmp_path / "candidate"
    shutil.copytree(storage.storage_url, baseline)
    shutil.copytree(storage.storage_url, candidate)
    return StorageResource(storage_url=str(baseline)), StorageResource(storage_url=str(candidate))


def _rewrite(storage, asset, name, change):
    frame = storage.read_parquet(asset, P, name)
    storage.write_parquet(change(frame), asset, P, name)


def _transcribed(storage) -> str:
    units = storage.read_parquet("transcripts", P, "units")
    return units.filter(pl.col("result_class") == "transcribed").sort("num_words", descending=True)["unit_id"][0]


def test_identical_runs_pass(runs):
    result = gate(*runs, [P])
    assert result.passed, result.table()
    assert result.word_edit_rate == 0.0 and result.speaker_agreement == 1.0 and result.lost_speech_s == 0.0


def test_changed_words_fail(runs):
    _, candidate = runs
    _rewrite(candidate, "transcripts", "words",
             lambda f: f.with_columns(
                 pl.when(pl.col("word_index") % 10 == 0).then(pl.lit("zzz")).otherwise(pl.col("word")).alias("word")))
    result = gate(*runs, [P])
    assert not result.passed and result.word_edit_rate > 0.01


def test_a_language_cannot_hide_its_word_edits_in_a_larger_one(runs):
    """Three words changed in the smallest unit, said to be Spanish: under 1 % of the partition's words, far over 1 %
    of the Spanish ones: the per-language bar fails."""
    baseline, candidate = runs
    units = baseline.read_parquet("transcripts", P, "units").filter(pl.col("result_class") == "transcribed")
    small = units.sort("num_words")["unit_id"][0]
    for storage in runs:
        _rewrite(storage, "transcripts", "units", lambda f: f.with_columns(
            pl.when(pl.col("unit_id") == small).then(pl.lit("es")).otherwise(pl.col("language")).alias("language")))
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns(
        pl.when((pl.col("unit_id") == small) & (pl.col("word_index") < 3)).then(pl.lit("zzz"))
        .otherwise(pl.col("word")).alias("word")))
    result = gate(*runs, [P])
    rates = result.language_edit_rates()
    assert result.word_edit_rate <= 0.01 < rates["es"] and rates["en"] == 0.0, rates
    assert not result.passed and "word edit rate [es]" in result.table()


def test_swapped_speakers_fail(runs):
    _, candidate = runs
    uid = _transcribed(candidate)
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns(
        pl.when((pl.col("unit_id") == uid) & (pl.col("word_index") % 4 == 1)).then(pl.lit("SPEAKER_99"))
        .otherwise(pl.col("speaker")).alias("speaker")))
    result = gate(*runs, [P])
    assert not result.passed and result.speaker_agreement < 0.97, result.table()


def test_a_dropped_unit_fails(runs):
    _, candidate = runs
    uid = _transcribed(candidate)
    _rewrite(candidate, "transcripts", "units", lambda f: f.filter(pl.col("unit_id") != uid))
    result = gate(*runs, [P])
    assert not result.passed and any("<missing>" in c for c in result.class_changes)


def test_a_class_change_fails(runs):
    _, candidate = runs
    uid = _transcribed(candidate)
    _rewrite(candidate, "transcripts", "units", lambda f: f.with_columns(
        pl.when(pl.col("unit_id") == uid).then(pl.lit("failed"))
        .otherwise(pl.col("result_class")).alias("result_class")))
    result = gate(*runs, [P])
    assert not result.passed and result.class_changes == [f"{uid}: transcribed -> failed"]


def test_a_word_on_a_silent_unit_fails(runs):
    _, candidate = runs
    silent = candidate.read_parquet("transcripts", P, "units").filter(pl.col("result_class") == "silent")["unit_id"][0]
    _rewrite(candidate, "transcripts", "words", lambda f: pl.concat([f, pl.DataFrame(
        {"unit_id": [silent], "segment_index": [0], "word_index": [0], "start_s": [1.0], "end_s": [1.2],
         "word": ["hello"], "speaker": ["SPEAKER_00"], "score": [0.9], "channel": [None]},
        schema=f.schema)]))
    result = gate(*runs, [P])
    assert not result.passed and result.words_on_silent_units == 1


def test_lost_speech_fails(runs):
    _, candidate = runs
    _rewrite(candidate, "vad_scores", "regions", lambda f: f.with_columns((pl.col("end_s") - 0.5).alias("end_s")))
    result = gate(*runs, [P])
    assert not result.passed and result.lost_speech_s > result.lost_speech_allowed_s


TRUTH_FILE = REPO_ROOT / "sample_data" / "truth" / f"{P}.json"


def test_turns_worse_against_the_truth_fail_the_der_bar(runs):
    """The approximate levers' bar: with the sample's truth, one unit's turns all given one speaker (its words keep
    theirs) puts the candidate's DER far over the baseline's; without a truth the DER is reported, not held."""
    _, candidate = runs
    truth = {P: read_truth(TRUTH_FILE)}
    identical = gate(*runs, [P], truth=truth)
    assert identical.passed and identical.der_points_worse == 0.0 and identical.against_baseline.rate == 0.0
    assert 0.0 < identical.baseline_vs_truth.rate < 0.3, identical.table()  # the tiny models against the truth
    uid = _transcribed(candidate)
    _rewrite(candidate, "diarization", "turns", lambda f: f.with_columns(
        pl.when(pl.col("unit_id") == uid).then(pl.lit("SPEAKER_00")).otherwise(pl.col("speaker")).alias("speaker")))
    result = gate(*runs, [P], truth=truth)
    assert not result.passed and result.der_points_worse > 0.5 and result.against_baseline.rate > 0.01
    assert {name for name, _, _, ok in result.bars() if not ok} == {"DER vs truth, points over baseline"}
    untold = gate(*runs, [P])
    assert untold.passed and untold.against_baseline.rate == result.against_baseline.rate
    command = [sys.executable, "-m", "batch_assets.gate", "--baseline", runs[0].storage_url,
               "--candidate", candidate.storage_url, "--partition", P]
    told = subprocess.run([*command, "--truth", f"{P}={TRUTH_FILE}"], capture_output=True, text=True)
    assert told.returncode == 1 and "DER vs truth, points over baseline" in told.stdout
    bad = subprocess.run([*command, "--truth", str(TRUTH_FILE)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--truth takes PARTITION=FILE" in bad.stderr
    with pytest.raises(ValueError, match="the baseline does not have: nowhere.wav"):  # it would score nothing
        gate(*runs, [P], truth={P: {"nowhere.wav": [(0.0, 1.0, "x")]}})


def _exact(runs) -> tuple[bool, dict[str, str]]:
    result = gate(*runs, [P], exact=True)
    return result.passed, {name: value for name, value, _, ok in result.bars() if not ok}


def test_exact_holds_every_published_column(runs):
    """What the levers promise: decisions identical, each continuous column within its bound. The word-level bars
    pass every change below (no word, speaker, class or speech changes); only the exact gate sees them."""
    baseline, candidate = runs
    assert _exact(runs) == (True, {})
    uid = _transcribed(candidate)
    # provenance (how a row was made) is not a result
    _rewrite(candidate, "diarization", "speakers",
             lambda f: f.with_columns(pl.lit("stock (test)").alias("embedding_path")))
    assert _exact(runs) == (True, {})
    # a continuous column within its bound passes, beyond it fails and says by how much
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns(
        pl.when(pl.col("unit_id") == uid).then(pl.col("score") - 5e-5).otherwise(pl.col("score")).alias("score")))
    assert _exact(runs) == (True, {})
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns(
        pl.when(pl.col("word_index") == 3).then(pl.col("score") - 0.014).otherwise(pl.col("score")).alias("score")))
    assert gate(*runs, [P]).passed and _exact(runs)[1].keys() == {"transcripts/words.score max |diff|"}
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns(
        pl.when(pl.col("word_index") == 3).then(float("nan")).otherwise(pl.col("score")).alias("score")))
    assert _exact(runs)[1] == {"decision columns changed": "1"}  # a NaN on one side is not a difference
    shutil.copytree(baseline.storage_url + "/transcripts", candidate.storage_url + "/transcripts", dirs_exist_ok=True)
    _rewrite(candidate, "diarization", "speakers", lambda f: f.with_columns(pl.col("embedding").list.eval(
        pl.element() + 0.0083)))
    passed, failed = _exact(runs)
    assert not passed and failed == {"diarization/speakers.embedding max |diff|": "8.30e-03"}
    shutil.copytree(baseline.storage_url + "/diarization", candidate.storage_url + "/diarization", dirs_exist_ok=True)
    # a decision column: a word's end moved by a millisecond, every word still there with its speaker
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns(
        pl.when(pl.col("word_index") == 2).then(pl.col("end_s") + 0.001).otherwise(pl.col("end_s")).alias("end_s")))
    result = gate(*runs, [P], exact=True)
    assert gate(*runs, [P]).passed and not result.passed
    assert [c.split(":")[0] for c in result.columns.changed] == [f"transcripts/words.end_s ({P})"]
    assert "column change: transcripts/words.end_s" in result.table()


def test_exact_reads_the_vad_score_arrays_of_each_run(runs):
    """The arrays behind `scores_uri` are a continuous column: a moved score fails beyond the bound, a NaN on one
    side or an array that cannot be read is a change. Read only with `exact` (one read per unit and run)."""
    baseline, candidate = runs
    units = candidate.read_parquet("vad_scores", P, "units")
    uid, uri = units["unit_id"][0], units["scores_uri"][0]

    def point_to(array) -> None:
        new = candidate.write_array(array, "vad_scores", P, "moved")
        _rewrite(candidate, "vad_scores", "units", lambda f: f.with_columns(
            pl.when(pl.col("unit_id") == uid).then(pl.lit(new)).otherwise(pl.col("scores_uri")).alias("scores_uri")))

    scores = baseline.read_array(uri).astype("float32")
    point_to(scores)
    assert _exact(runs) == (True, {})  # another file, the same scores
    point_to(scores + 2e-4)
    assert _exact(runs)[1] == {"vad_scores/units.scores max |diff|": "2.00e-04"}
    assert gate(*runs, [P]).passed  # not read without exact
    nan = scores.copy()
    nan.flat[7] = float("nan")
    point_to(nan)
    result = gate(*runs, [P], exact=True)
    assert not result.passed
    assert result.columns.changed == [f"vad_scores/units.scores ({P}) {uid}: NaN on one side at 7"]
    _rewrite(candidate, "vad_scores", "units", lambda f: f.with_columns(
        pl.when(pl.col("unit_id") == uid).then(pl.lit(uri + ".gone")).otherwise(pl.col("scores_uri"))
        .alias("scores_uri")))
    result = gate(*runs, [P], exact=True)
    assert not result.passed and "FileNotFoundError" in result.columns.changed[0]
    # the H200's unreadable array (issue 46): its header's alignment padding NUL where np.save writes spaces
    point_to(scores)
    raw = bytearray(pathlib.Path(candidate.read_parquet("vad_scores", P, "units")["scores_uri"][0]).read_bytes())
    end = raw.index(b"\n")
    raw[end - 33:end] = bytes(33)
    candidate.write_bytes(candidate.read_parquet("vad_scores", P, "units")["scores_uri"][0], bytes(raw))
    result = gate(*runs, [P], exact=True)
    assert not result.passed and "Cannot parse header" in result.columns.changed[0]


def test_command_line_exit_codes(runs):
    baseline, candidate = runs
    command = [sys.executable, "-m", "batch_assets.gate", "--baseline", baseline.storage_url,
               "--candidate", candidate.storage_url, "--partition", P]
    ok = subprocess.run(command, capture_output=True, text=True)
    assert ok.returncode == 0 and "PASS" in ok.stdout and "FAIL" not in ok.stdout
    _rewrite(candidate, "transcripts", "words", lambda f: f.with_columns((pl.col("score") * 0.9).alias("score")))
    assert subprocess.run(command, capture_output=True, text=True).returncode == 0  # scores alone: words intact
    exact = subprocess.run([*command, "--exact"], capture_output=True, text=True)
    assert exact.returncode == 1 and "transcripts/words.score max |diff|" in exact.stdout and "FAIL" in exact.stdout
    _rewrite(candidate, "transcripts", "units", lambda f: f.head(1))
    failed = subprocess.run(command, capture_output=True, text=True)
    assert failed.returncode == 1 and "FAIL" in failed.stdout


def _evaluations(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def test_asset_checks_run_in_materialize(sample_run):
    result, _ = sample_run
    # no baseline configured: the gate check is not part of the definitions at all (never a Passed that did not run)
    assert _evaluations(result) == {"units_accounted_for": True, "partition_has_audio": True,
                                    "no_words_on_silent_units": True, "exports_cover_units": True,
                                    "exports_match_tables": True}


def test_a_day_whose_every_unit_went_unread_fails_the_error_check(runs):
    """Issue 64: a versioned bucket left every unit changed_since_listed, and the run succeeded with every check
    passing. A day whose every listed unit went unread (fetch_failed or changed_since_listed) fails
    `units_accounted_for`, an ERROR check (the failed-check sensor alerts); one unit read is enough to pass."""
    from batch_assets.gate.checks import _accounted_for

    _, candidate = runs
    assert _accounted_for(candidate, P)[0]
    unread = ["changed_since_listed", "fetch_failed"]
    _rewrite(candidate, "transcripts", "units", lambda f: f.with_columns(
        pl.Series("result_class", [unread[i % 2] for i in range(f.height)])))
    passed, metadata = _accounted_for(candidate, P)
    assert not passed and metadata["unread"] == metadata["units"] and "went unread" in metadata["problem"]
    _rewrite(candidate, "transcripts", "units", lambda f: f.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("transcribed")).otherwise("result_class")
        .alias("result_class")))
    assert _accounted_for(candidate, P)[0]


def test_gate_check_against_a_configured_baseline(runs, tmp_path, lock_dir):
    from batch_assets.gate.checks import BaselineResource, gate_against_baseline

    from .conftest import make_resources, materialize_partition

    baseline, _ = runs
    _rewrite(baseline, "transcripts", "words",
             lambda f: f.with_columns(
                 pl.when(pl.col("word_index") % 5 == 0).then(pl.lit("zzz")).otherwise(pl.col("word")).alias("word")))
    resources = make_resources(tmp_path / "new", lock_dir) | {
        "baseline": BaselineResource(storage_url=baseline.storage_url)}
    result = materialize_partition(resources, checks=[gate_against_baseline])
    assert result.success  # the gate check is not blocking: the outputs are written and the failure is visible
    evaluations = _evaluations(result)
    assert evaluations["units_accounted_for"] and evaluations["no_words_on_silent_units"]
    assert evaluations["gate_against_baseline"] is False
