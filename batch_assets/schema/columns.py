"""What every output column means, for the column descriptions the UI shows beside each asset's schema.

One dictionary for all tables (a name means the same thing wherever it appears; where a table gives it a
narrower sense, docs/outputs.md says so). `table_schema` turns a polars schema into
Dagster's `TableSchema` with these descriptions.
"""

from __future__ import annotations

import dagster as dg
import polars as pl

COLUMN_DESCRIPTIONS: dict[str, str] = {
    "day": "The daily partition the row belongs to",
    "unit_id": "Stable, file-name-safe id of the unit: its key under the partition folder, '/' as '__' (a slug and a "
               "sha256 prefix when that key cannot be one)",
    "source_uri": "Where the audio object was read from",
    "relative_key": "The object's path under {source}/YYYY-MM-DD/",
    "bytes": "Size of the object in bytes",
    "etag": "The object's S3 ETag when listed (an opaque token, not an MD5); the GPU step reads only bytes with it "
            "(else changed_since_listed); null locally",
    "version_id": "The object's S3 VersionId when listed, on a bucket that keeps versions: the GPU step reads that "
                  "version; null otherwise",
    "mtime_ns": "A local object's modification time when listed (ns); the GPU step reads it only if unchanged before "
                "and after the read; null on S3",
    "probe_bytes": "Bytes of the object read to list it: ranged reads of its header (head and tail), never its body",
    "sha256": "SHA-256 of the object's bytes, computed by the GPU step as it read them (null when it was never read)",
    "duration_s": "Seconds of audio: declared by the header in the manifest and the plan, decoded (16 kHz) in the GPU "
                  "tables",
    "duration_estimated": "The container states no exact length (a stream written to a pipe or recorded live, an MP3 "
                          "without a Xing frame): duration_s is the listing's estimate, and the GPU step decodes the "
                          "object to the end of its stream",
    "declared_duration_s": "Seconds the audio's header declared, or the listing's estimate where it declared none "
                           "(fetched_audio's duration_estimated); a truncated unit decoded fewer",
    "planned_duration_s": "Seconds the unit was planned at: the manifest's duration (twice it where the listing only "
                          "estimated it, duration_estimated)",
    "sample_rate": "Original sample rate (Hz)",
    "channels": "Original channel count",
    "result_class": "The unit's outcome (docs/outputs.md: Result classes)",
    "reason": "Why the unit has its class (null when nothing needs saying)",
    "flight_id": "The flight (units a GPU step decodes together, within the decode budget) the unit was processed in",
    "position": "The unit's position in its flight",
    "offset_samples": "Where the unit is planned to start in its flight's audio (samples at 16 kHz, from the listing)",
    "num_samples": "The unit's planned length in its flight's audio (samples at 16 kHz, from the listing)",
    "offset_s": "Where the unit is planned to start in its flight's audio (seconds)",
    "window": "The window of a unit processed in windows (longer than max_unit_seconds); null: processed whole",
    "window_start_s": "Where the window starts in its unit (seconds; null: processed whole)",
    "num_units": "Units in the flight",
    "audio_s": "Seconds of audio planned in the flight (from the listed durations)",
    "speech_s": "Seconds of speech found by VAD",
    "num_regions": "Speech regions found by VAD",
    "num_chunks": "Segmentation chunks the unit was scored in",
    "frames_per_chunk": "Segmentation frames per chunk",
    "local_speakers": "Local speakers per chunk in the segmentation scores",
    "chunk_duration_s": "Segmentation chunk length (seconds)",
    "chunk_step_s": "Segmentation chunk step (seconds)",
    "scores_uri": "Raw segmentation scores (.npy: chunks x frames x local speakers)",
    "start_s": "Start, in seconds from the start of the unit",
    "end_s": "End, in seconds from the start of the unit",
    "speaker": "Speaker label within the unit (SPEAKER_00, SPEAKER_01, ...; labels are per unit)",
    "exclusive": "False: the diarization with overlaps; true: the exclusive one used to attribute words",
    "embedding": "The speaker's embedding (centroid) within the unit",
    "segmentation": "How diarization got its segmentation scores ('reused' from VAD, or computed)",
    "embedding_path": "How the embeddings were computed: 'shared trunk' (one trunk forward per chunk), "
                      "or 'stock' with the reason",
    "num_speakers": "Speakers found in the unit",
    "num_words": "Words transcribed in the unit",
    "text": "The words joined: the unit's (units table) or the speaker turn's (segments table)",
    "segment_index": "The speaker turn in the unit (consecutive words of one speaker): a row of the segments table",
    "word_index": "The word's position in the unit",
    "word": "The word as the ASR model wrote it",
    "score": "The TDT decoder's confidence in the word (0..1, higher is surer; null when not computed)",
    "hint_num_speakers": "Speakers diarization was told to find (null: no such hint)",
    "hint_min_speakers": "Fewest speakers diarization was told to find (null: no such hint)",
    "hint_max_speakers": "Most speakers diarization was told to find (null: no such hint)",
    "hint_source": "Where the unit's speaker hints came from: 'sidecar' (its .json), 'run config', or null (none)",
    "format": "The export's format: srt, vtt, txt, json or rttm",
    "uri": "Where the file is",
    "hint_problem": "Why the unit's sidecar was ignored (null: no sidecar, or a good one)",
    "sidecar_language": "The language the unit's sidecar declares, as written (null: none); checked when the GPU "
                        "section runs (a bad code fails the unit)",
    "language": "The unit's language (ISO 639-1; null: no speech, or never processed)",
    "language_source": "Where the language came from: 'sidecar', 'run_config' or 'detected' (language identification)",
    "language_confidence": "The language identification model's probability for the language (null unless detected)",
    "sidecar_channels": "The channel choices of the unit's sidecar (JSON: channels, channel_speakers, "
                        "diarized_channels; null: none)",
    "channel": "The channel the row was heard on, from 0 (null: the unit was read as one signal)",
    "channel_reading": "How the unit's channels were read: 'mono' (one channel), 'mixed' (mixed down to one signal), "
                       "'by_channel' (each channel on its own; docs/outputs.md: Channels)",
    "channel_source": "What decided the reading: 'auto' (measured on the audio), or where the forced mode came from: "
                      "'sidecar', 'run_config', 'setting', 'switch_off' (channel_reading_enabled off); null: one "
                      "channel",
    "channel_lead": "auto's measure: the smaller share of sound frames on which a channel is 10 dB louder than the "
                    "other (0.1 or more: read by channel; null: not measured)",
    "asr_model": "The ASR model the language is routed to (null: none, the unit is unsupported_language; or no speech)",
}


def table_schema(schema: dict[str, pl.DataType]) -> dg.TableSchema:
    """A published table's schema for the UI: its `day` column (`published.py`), then `schema`'s."""
    return dg.TableSchema(columns=[
        dg.TableColumn(name, str(dtype), description=COLUMN_DESCRIPTIONS.get(name))
        for name, dtype in ({"day": pl.Date} | schema).items()
    ])
