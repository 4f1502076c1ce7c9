"""What every output column means, for the column descriptions the UI shows beside each asset's schema.

One dictionary for all tables (a name means the same thing wherever it appears; where a table gives it a
narrower sense, the README's Outputs section says so). `table_schema` turns a polars schema into
Dagster's `TableSchema` with these descriptions.
"""

from __future__ import annotations

import dagster as dg
import polars as pl

COLUMN_DESCRIPTIONS: dict[str, str] = {
    "unit_id": "Stable, file-name-safe id of the unit (its key under the partition folder, '/' as '__')",
    "source_uri": "Where the audio object was read from",
    "relative_key": "The object's path under {source}/YYYY-MM-DD/",
    "bytes": "Size of the object in bytes",
    "sha256": "SHA-256 of the object's bytes (empty when it was never read)",
    "duration_s": "Seconds of audio: declared by the header in the manifest, decoded (16 kHz) after prepare",
    "declared_duration_s": "Seconds the audio's header declared (a truncated unit decoded fewer)",
    "planned_duration_s": "Seconds the manifest declared when the unit was planned into its flight",
    "sample_rate": "Original sample rate (Hz)",
    "channels": "Original channel count",
    "result_class": "The unit's outcome (README: Result classes)",
    "reason": "Why the unit has its class (empty when nothing needs saying)",
    "flight_id": "The flight (packed decoded audio) the unit was processed in",
    "position": "The unit's position in its flight",
    "offset_samples": "Where the unit starts in its flight's audio (samples at 16 kHz)",
    "num_samples": "The unit's length in its flight's audio (samples at 16 kHz)",
    "offset_s": "Where the unit starts in its flight's audio (seconds)",
    "num_units": "Units in the flight",
    "audio_s": "Seconds of decoded audio in the flight",
    "audio_uri": "The flight's decoded audio (.npy, float32, 16 kHz mono)",
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
    "embedding_path": "How the embeddings were computed: 'shared trunk' (one trunk forward per chunk), or 'stock' with the reason",
    "num_speakers": "Speakers found in the unit",
    "num_words": "Words transcribed in the unit",
    "text": "The unit's words joined (speaker turns: the words table or `batch-assets show`)",
    "word_index": "The word's position in the unit",
    "word": "The word as the ASR model wrote it",
}


def table_schema(schema: dict[str, pl.DataType]) -> dg.TableSchema:
    return dg.TableSchema(columns=[
        dg.TableColumn(name, str(dtype), description=COLUMN_DESCRIPTIONS.get(name)) for name, dtype in schema.items()
    ])
