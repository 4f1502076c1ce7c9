"""Each kill switch's off path runs, and no lever changes any published column (each alone off, and all off; a path
switch, which changes results by design, is run off where its path is tested: `channel_reading_enabled` in
test_channels)."""

from __future__ import annotations

import pathlib
import shutil

import dagster as dg
import pytest

from batch_assets.gate.checks import transcripts_checks
from batch_assets.gate.columns import EMBEDDING, SCORE, VAD_SCORES
from batch_assets.gate.compare import gate
from batch_assets.gate.diarization_error import read_truth
from batch_assets.gpu.assets import gpu_section
from batch_assets.storage.resource import REPO_ROOT, SAMPLE_PARTITION
from batch_assets.switches import SWITCHES

from .conftest import make_resources, tables_of

pytestmark = pytest.mark.e2e  # every test here runs the job, a server or a deployment

# every switch but a path's (its off path reads the sample's call mixed: other results by design, run off in
# test_channels)
LEVERS = tuple(s.name for s in SWITCHES if s.kind != "path")
EXACT = tuple(s.name for s in SWITCHES if s.kind == "exact")  # the levers that change no result
# each exact lever alone off, but those whose off path only runs the same operations at another time and place, which
# all off takes (its tables against all on's): lever 3 (CUDA graphs: on a CPU decoding is eager whatever it asks),
# lever 1 (prepare ahead: the same fetch and decode, in the section) and lever 6 (host overlap: the same host work,
# under the lock); the levers that change what is computed together (batches, reuse, the shared trunk) alone each
ALL_OFF_ONLY = ("asr_cuda_graphs_enabled", "prepare_flight_enabled", "host_overlap_enabled")
VARIANTS = ({f"{lever}=false": {lever: False} for lever in EXACT if lever not in ALL_OFF_ONLY}
            | {"all off": {lever: False for lever in LEVERS}})


def section_metadata(result) -> dict:
    event = next(e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "transcripts")
    return {k: v.value for k, v in event.materialization.metadata.items()}


def section_run(tmp_path_factory, lock_dir, sample_run, config: dict):
    """The GPU section (its three assets and their checks) with `config` on the sample run's ingest outputs: the
    levers and the language live in the GPU section alone, so ingest and exports (which `sample_run` ran) are not
    run again."""
    root = tmp_path_factory.mktemp("storage-variant")
    for asset in ("fetched_audio", "prepared_flights"):
        shutil.copytree(pathlib.Path(sample_run[1].storage_url) / asset, root / asset)
    resources = make_resources(root, lock_dir)
    result = dg.materialize([gpu_section, *transcripts_checks], partition_key=SAMPLE_PARTITION,
                            resources=resources, instance=dg.DagsterInstance.ephemeral(),
                            run_config={"ops": {"gpu_section": {"config": config}}})
    assert result.success
    return result, resources["storage"]


@pytest.fixture(scope="module")
def variant_runs(tmp_path_factory, lock_dir, sample_run):
    """Each variant's GPU section (the first test's setup): four in-process GPU sections of the sample, three exact
    levers alone off (`VARIANTS`) and all off; each off path against the same tables is what is tested."""
    return {name: section_run(tmp_path_factory, lock_dir, sample_run, switches)
            for name, switches in VARIANTS.items()}


def test_english_declared_or_detected_gives_the_same_tables(tmp_path_factory, lock_dir, sample_run):
    """The sample partition (English, and a silent room) run with `language: en` against the default `auto`: every
    published column identical but where the language came from (`run_config`, no confidence: no LID ran)."""
    result, declared = section_run(tmp_path_factory, lock_dir, sample_run, {"language": "en"})
    assert section_metadata(result)["stage_seconds"]["language_id"]["device"] == 0.0
    for (asset, name), detected in tables_of(sample_run[1]).items():
        other = tables_of(declared)[asset, name]
        if (asset, name) == ("transcripts", "units"):
            speech = detected["language"].is_not_null()
            assert set(detected.filter(speech)["language_source"]) == {"detected"}
            assert set(other.filter(speech)["language_source"]) == {"run_config"}
            assert other["language_confidence"].is_null().all() and detected.filter(speech)["language"].eq("en").all()
            detected, other = (t.drop("language_source", "language_confidence") for t in (detected, other))
        drop = [c for c in ("scores_uri", "source_uri") if c in detected.columns]
        assert detected.drop(drop).equals(other.drop(drop)), (asset, name)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_switches_are_recorded(variant, variant_runs, sample_run):
    assert section_metadata(sample_run[0])["switches"] == {s.name: s.default for s in SWITCHES}
    expected = {s.name: s.default and s.name not in VARIANTS[variant] for s in SWITCHES}
    assert section_metadata(variant_runs[variant][0])["switches"] == expected


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_lever_off_gives_identical_tables(variant, variant_runs, sample_run):
    """Every published column (the exact gate, `gate/columns.py`): decisions identical; word scores and VAD scores
    bitwise; speaker embeddings within the last bits where the shared trunk batches chunks where stock batches
    pairs, and lever 5 fills its batches across units (the tiny x-vector's kernels on this CPU: 1.2e-7)."""
    on, off = sample_run[1], variant_runs[variant][1]
    result = gate(on, off, [SAMPLE_PARTITION], exact=True)
    assert result.passed and not result.columns.changed, result.table()
    largest = result.columns.largest
    assert largest[SCORE] == 0.0 and largest[VAD_SCORES] == 0.0, largest
    batch_shapes_change = {"embedding_shared_trunk_enabled", "batch_across_units_enabled"} & set(VARIANTS[variant])
    assert largest[EMBEDDING] <= (1e-6 if batch_shapes_change else 0.0), largest


def test_reuse_runs_the_segmentation_model_once_instead_of_twice(variant_runs, sample_run):
    on = section_metadata(sample_run[0])
    off = section_metadata(variant_runs["vad_segmentation_reuse_enabled=false"][0])
    unbatched = section_metadata(variant_runs["all off"][0])
    assert set(on["segmentation_reuse"]) == {"reused"}
    assert set(off["segmentation_reuse"]) == set(unbatched["segmentation_reuse"]) == {"not offered"}
    on_stages, off_stages = on["segmentation_forwards_by_stage"], off["segmentation_forwards_by_stage"]
    assert on_stages["vad"] == off_stages["vad"] > 0
    assert on_stages["diarization"] == 0  # once: diarization consumed VAD's scores
    assert off_stages["diarization"] > 0
    stages = unbatched["segmentation_forwards_by_stage"]  # unit by unit, a forward per batch of one unit's chunks
    assert stages["diarization"] == stages["vad_of_diarized_units"] > 0  # twice for every diarized unit
    assert on["segmentation_forwards"] == on_stages["vad"]
    assert off["segmentation_forwards"] == off_stages["vad"] + off_stages["diarization"]


def test_prepared_flights_stay_within_budget(variant_runs, sample_run):
    assert 0 < section_metadata(sample_run[0])["max_prepared_ahead_seconds"] <= 1800
    assert section_metadata(variant_runs["all off"][0])["max_prepared_ahead_seconds"] == 0


def test_cpu_runs_eager_decoding_whatever_is_requested(variant_runs, sample_run):
    assert section_metadata(sample_run[0])["decoder_modes"] == ["eager (cuda graphs unavailable on cpu)"]
    assert section_metadata(variant_runs["all off"][0])["decoder_modes"] == ["eager"]


def test_shared_trunk_runs_one_trunk_forward_per_chunk_at_most(variant_runs, sample_run):
    on = section_metadata(sample_run[0])
    off = section_metadata(variant_runs["embedding_shared_trunk_enabled=false"][0])
    alone = section_metadata(variant_runs["batch_across_units_enabled=false"][0])
    assert (set(on["embedding_paths"]) == {"shared trunk, batched across units"}
            and set(alone["embedding_paths"]) == {"shared trunk"})
    assert set(off["embedding_paths"]) == {"stock (switch off)"}
    assert alone["embedding_work"] == on["embedding_work"]  # the same work, in batches that span units
    w, s = on["embedding_work"], off["embedding_work"]
    assert w["chunks"] == s["chunks"] > 0 and w["pairs"] == s["pairs"] == 3 * w["chunks"]
    assert 0 < w["trunk_forwards"] <= w["chunks"] and s["trunk_forwards"] == s["pairs"]
    assert w["pooled_pairs"] == w["active_pairs"] == s["active_pairs"] < s["pooled_pairs"] == s["pairs"]


def test_lever_6_takes_host_work_off_the_device_path(variant_runs, sample_run):
    on = section_metadata(sample_run[0])
    off = section_metadata(variant_runs["all off"][0])

    def host(meta):
        return sum(split["host"] for split in meta["stage_seconds"].values())

    for meta in (on, off):
        assert set(meta["stage_seconds"]) == {"vad", "language_id", "diarization", "asr", "attribution", "tables",
                                              "model_load"}
        assert meta["stage_seconds"]["diarization"]["host"] > 0 and meta["stage_seconds"]["tables"]["host"] > 0
        assert meta["stage_seconds"]["vad"]["device"] > 0 and meta["stage_seconds"]["asr"]["device"] > 0
    # off: every host second is on the device work's path; on: only VAD's score aggregation and the speaker counting
    # that picks the diarization forwards' embeddings stay there (clustering, attribution and tables move off)
    assert (off["host_seconds_in_section"] == pytest.approx(host(off), abs=0.005)
            and off["host_after_section_seconds"] == 0)
    for stage, split in off["stage_seconds"].items():
        assert split["host_in_section"] == pytest.approx(split["host"], abs=0.002), stage
    in_section = {stage: split["host_in_section"] for stage, split in on["stage_seconds"].items()}
    assert on["host_seconds_in_section"] == pytest.approx(sum(in_section.values()), abs=0.005)
    assert in_section["vad"] == pytest.approx(on["stage_seconds"]["vad"]["host"], abs=0.002)
    assert 0 < in_section["diarization"] < on["stage_seconds"]["diarization"]["host"]
    assert in_section["attribution"] == in_section["tables"] == 0 and in_section["asr"] == 0
    assert on["host_after_section_seconds"] > 0  # the last flight's host work, after the lock was released


APPROXIMATE = {s.name: True for s in SWITCHES if s.kind == "approximate"}


def test_the_approximate_levers_pass_their_gate_against_all_on(tmp_path_factory, lock_dir, sample_run):
    """Both approximate levers on (the exact ones at their defaults) against the sample run (all on): the gate for
    approximate levers holds (speaker agreement, words, speech, classes, and DER against the sample's truth at most
    0.5 points over all on's), while the trunk hears each second about once instead of about ten times."""
    result, approximate = section_run(tmp_path_factory, lock_dir, sample_run, APPROXIMATE)
    truth = {SAMPLE_PARTITION: read_truth(REPO_ROOT / "sample_data" / "truth" / f"{SAMPLE_PARTITION}.json")}
    verdict = gate(sample_run[1], approximate, [SAMPLE_PARTITION], truth=truth)
    assert verdict.passed and verdict.truth_given, verdict.table()
    meta, exact = section_metadata(result), section_metadata(sample_run[0])
    assert meta["switches"] == {s.name: s.default or s.name in APPROXIMATE for s in SWITCHES}
    assert set(meta["embedding_paths"]) == {"trunk blocks (approximate), covered pairs copied (approximate)"}
    w, e = meta["embedding_work"], exact["embedding_work"]
    assert w["chunks"] == e["chunks"] and w["active_pairs"] == e["active_pairs"] and w["copied_pairs"] > 0
    assert w["pooled_pairs"] + w["copied_pairs"] == e["pooled_pairs"]  # every active pair: pooled or copied
    assert e["copied_pairs"] == 0 and 0 < w["trunk_seconds"] < e["trunk_seconds"] / 5
