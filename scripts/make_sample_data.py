"""Generate the bundled sample partitions: real (synthetic) speech with known words and speakers.

espeak-ng voices speak a scripted dialogue turn by turn, with pauses between turns; each unit is
written in a different container format, and one unit is a silent room. The support call is recorded as contact
centres record calls: each party on its own channel (`CHANNEL_CALLS`), so the day has a call the pipeline reads
channel by channel. The second day, 2026-01-16, has a
three-speaker review meeting with a sidecar (`review.wav.json`: speaker-count hints) and a short call. The
third, 2026-01-17, has a call or meeting in English, Spanish (one declaring `es` in its sidecar), German and
Japanese (kana, heard by `builtin:tiny-tdt-ja`). The exact ground truth (speaker turns with their words, and
the silent unit) is written beside the audio, outside the partition folder so the pipeline never lists it as
audio.

    python scripts/make_sample_data.py            # rewrites sample_data/ (needs espeak-ng)

Deterministic for a given espeak-ng build: seeded pauses and noise, fixed voices.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import tempfile

import numpy as np
import soundfile as sf
import soxr

ROOT = pathlib.Path(__file__).resolve().parents[1] / "sample_data"
PARTITION = "2026-01-15"
SAMPLE_RATE = 16_000

# voice, words per minute, pitch (0-99)
SPEAKERS = {
    "alice": ("en-us+f3", 150, 60),
    "bob": ("en-gb+m3", 140, 35),
    "carol": ("en-us+f5", 165, 75),
    "dave": ("en+m7", 130, 25),
}

# Written in the builtin ASR model's vocabulary (the 500 most common English words, see
# batch_assets/training/corpus.py): every word is one the tiny model was trained on, in sentences it never saw.
DIALOGUES = {
    "meetings/standup.wav": [
        ("alice", "good morning everyone let us start the team talk"),
        ("bob", "last week i made the report for the new company"),
        ("alice", "great work did you give it to the team"),
        ("bob", "yes i put it on the system last night and they like it"),
        ("alice", "today i will look at the data for next week"),
        ("bob", "i can help you with that after the morning call"),
        ("alice", "thank you that would be very good"),
        ("bob", "no problem see you at two"),
        ("alice", "one more thing the office will not be open next week"),
        ("bob", "good to know i will work from home that week"),
        ("alice", "please remember to check the plan before you leave"),
        ("bob", "i will do it right after this call"),
        ("alice", "great that is all for today have a good one"),
    ],
    "calls/2026/support_call.flac": [
        ("carol", "good morning thank you for the call how can i help you today"),
        ("dave", "my order is still not here and it has been over a week"),
        ("carol", "i understand can you give me your order number"),
        ("dave", "sure it is four five six"),
        ("carol", "thank you i can see the order is still at the office"),
        ("dave", "can you get it out today please"),
        ("carol", "yes it will leave this morning and you will get a phone call"),
        ("dave", "that is good thank you for your help"),
        ("carol", "is there anything else i can do for you today"),
        ("dave", "no that was all have a nice day"),
        ("carol", "you too have a good day"),
    ],
    "calls/2026/interview.ogg": [
        ("bob", "thank you for coming on the show tell us about your new book"),
        ("carol", "it is a story about a small city by the water"),
        ("bob", "what made you want to talk about that place"),
        ("carol", "i was a child there and the people were very kind"),
        ("alice", "i read it a few months ago and i love the end"),
        ("carol", "thank you so much that means a lot to me"),
        ("alice", "who was your best friend in the story"),
        ("carol", "the old man in the white house because he always had time for everyone"),
        ("bob", "will there be a second book about the same city"),
        ("carol", "maybe i have some idea but nothing is done yet"),
        ("bob", "we are out of time but thank you both for coming"),
    ],
    "meetings/planning.mp3": [
        ("dave", "should we plan a day in the city next week"),
        ("alice", "yes i think we should leave early in the morning"),
        ("dave", "taking the car is easy but we need more money for it"),
        ("alice", "let us take the car and buy the food now"),
        ("dave", "how many hours do you want to stay there"),
        ("alice", "three hours is enough to see the old city and the water"),
        ("dave", "i will find a small place near the music school"),
        ("alice", "great call me when you have it"),
    ],
}
SILENT_UNIT = ("silence/empty_room.wav", 20.0)
# Two-channel calls: the parties in channel order. Each channel holds its party's turns and a room noise floor of its
# own (a seeded generator per call, so the other files' draws stay as they were).
CHANNEL_CALLS = {"calls/2026/support_call.flac": ("carol", "dave")}

SECOND_PARTITION = "2026-01-16"
SECOND_DIALOGUES = {
    "meetings/review.wav": [
        ("alice", "thank you all for coming let us look at the plan for next year"),
        ("dave", "i think the new system is good but we need more time"),
        ("carol", "how much time do you want for the work"),
        ("dave", "two more week would be enough for the team"),
        ("alice", "that is good can you give me the report by then"),
        ("carol", "i will help with the data and the report"),
        ("dave", "great thank you that would be very good"),
        ("alice", "so we all think the same see you next week"),
    ],
    "calls/followup.flac": [
        ("bob", "good morning i call about your order"),
        ("carol", "yes thank you is it here yet"),
        ("bob", "it will be there today after two"),
        ("carol", "that is great have a nice day"),
    ],
}
# The third day, 2026-01-17: one unit per language. English, Spanish and German are heard by the builtin models
# (each written in its language's 500 most common words: `sentences.common_words`), one Spanish call declares its
# language in a sidecar, and a Japanese call is kana (the builtin Japanese model hears kana, not a word list: some
# of its words are not among the ones it trained on).
THIRD_PARTITION = "2026-01-17"
LANGUAGE_SPEAKERS = {
    "lucia": ("es+f3", 150, 60), "pablo": ("es-419+m3", 140, 35),
    "anna": ("de+f2", 150, 65), "karl": ("de+m7", 135, 30),
    "yuki": ("ja+f3", 150, 60), "kenji": ("ja+m3", 140, 35),
}
THIRD_DIALOGUES = {
    "calls/en_call.wav": ("en", [
        ("alice", "good morning this is the office how can i help you"),
        ("bob", "i want to talk about the new system"),
        ("alice", "of course what do you want to know"),
        ("bob", "when will it be done for the team"),
        ("alice", "next week if all is good"),
        ("bob", "great thank you for the help"),
    ]),
    "calls/es_llamada.wav": ("es", [
        ("lucia", "hola buenos días en qué puedo hacer algo por usted"),
        ("pablo", "quiero hablar con alguien sobre mi cuenta"),
        ("lucia", "claro me puede dar su nombre y el número"),
        ("pablo", "mi nombre es juan y el número es cinco cuatro tres"),
        ("lucia", "gracias juan veo que hay un problema con su cuenta"),
        ("pablo", "sí es verdad hace una semana que no está bien"),
        ("lucia", "vamos a ver ahora todo está bien otra vez"),
        ("pablo", "muchas gracias por su ayuda hasta mañana"),
    ]),
    "meetings/de_besprechung.wav": ("de", [
        ("anna", "guten morgen wir haben heute nicht viel zeit"),
        ("karl", "ja ich weiss das thema ist die neue arbeit"),
        ("anna", "genau wer kann bis morgen etwas schreiben"),
        ("karl", "ich kann das gerne machen aber nicht heute"),
        ("anna", "gut dann sehen wir uns am ende der woche"),
        ("karl", "danke das ist für mich sehr gut"),
        ("anna", "noch eine frage kommt das geld diese woche"),
        ("karl", "ja ich glaube schon bis dann"),
    ]),
    "calls/es_proyecto.flac": ("es", [
        ("pablo", "hola soy josé de la empresa"),
        ("lucia", "hola josé qué tal el trabajo"),
        ("pablo", "muy bien gracias mañana tenemos un nuevo proyecto"),
        ("lucia", "bueno hasta mañana entonces"),
    ]),
    "calls/ja_call.wav": ("ja", [
        ("yuki", "おはよう ございます きょう は いい てんき です ね"),
        ("kenji", "そう です ね ありがとう ございます"),
        ("yuki", "あした も よろしく おねがい します"),
    ]),
}
SIDECARS = {"meetings/review.wav": {"num_speakers": 3}, "calls/es_proyecto.flac": {"language": "es"}}


def speak(voice: str, wpm: int, pitch: int, text: str) -> np.ndarray:
    with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(wpm), "-p", str(pitch), "-w", tmp.name, text],
            check=True,
            capture_output=True,
        )
        audio, rate = sf.read(tmp.name, dtype="float32")
    audio = soxr.resample(audio, rate, SAMPLE_RATE)
    # espeak pads each utterance with silence: trim it so turn boundaries are exact.
    voiced = np.flatnonzero(np.abs(audio) > 0.01)
    return audio[voiced[0] : voiced[-1] + 1]


def build_dialogue(turns: list[tuple[str, str]], rng: np.random.Generator) -> tuple[np.ndarray, list[dict]]:
    pieces, truth, cursor = [], [], 0.0
    lead = np.zeros(int(0.8 * SAMPLE_RATE), dtype=np.float32)
    pieces.append(lead)
    cursor += len(lead) / SAMPLE_RATE
    for speaker, text in turns:
        voice, wpm, pitch = (SPEAKERS | LANGUAGE_SPEAKERS)[speaker]
        audio = 0.5 * speak(voice, wpm, pitch, text) / 0.9
        start = cursor
        pieces.append(audio.astype(np.float32))
        cursor += len(audio) / SAMPLE_RATE
        truth.append({"speaker": speaker, "start_s": round(start, 3), "end_s": round(cursor, 3), "text": text})
        pause = np.zeros(int(rng.uniform(0.6, 1.6) * SAMPLE_RATE), dtype=np.float32)
        pieces.append(pause)
        cursor += len(pause) / SAMPLE_RATE
    signal = np.concatenate(pieces)
    signal += rng.normal(0.0, 0.002, size=signal.shape).astype(np.float32)  # a quiet room, not digital zero
    return signal, truth


def on_channels(signal: np.ndarray, turns: list[dict], parties: tuple[str, ...], seed: int) -> np.ndarray:
    """(frames, parties): the dialogue `signal` with each party's turns on its own channel; every channel has its
    own quiet noise floor where its party is silent. The channels summed give the dialogue (its noise, and the other
    channel's noise floor on top)."""
    rng = np.random.default_rng(seed)
    out = rng.normal(0.0, 0.002, size=(len(signal), len(parties))).astype(np.float32)
    for turn in turns:  # 20 ms either side: a turn's times are rounded to the millisecond
        start, end = max(0, int((turn["start_s"] - 0.02) * SAMPLE_RATE)), int((turn["end_s"] + 0.02) * SAMPLE_RATE)
        out[start:end, parties.index(turn["speaker"])] = signal[start:end]
    return out


def check_vocabulary() -> None:
    from batch_assets.models.sentences import outside_vocabulary

    dialogues = [*DIALOGUES.values(), *SECOND_DIALOGUES.values()]
    outside = sorted(outside_vocabulary(text for turns in dialogues for _, text in turns))
    for language, turns in THIRD_DIALOGUES.values():
        if language != "ja":  # the Japanese model's vocabulary is kana, not words
            outside += sorted(outside_vocabulary((text for _, text in turns), language=language))
    if outside:
        raise SystemExit(f"words outside the builtin ASR models' vocabularies: {outside}")


def write_dialogues(dialogues: dict, audio_dir: pathlib.Path, rng: np.random.Generator) -> dict[str, dict]:
    """Each dialogue spoken into its file (and its sidecar, if it has one); the ground truth by relative key."""
    truth: dict[str, dict] = {}
    for rel, turns in dialogues.items():
        signal, turns_truth = build_dialogue(turns, rng)
        out = audio_dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if rel in CHANNEL_CALLS:
            signal = on_channels(signal, turns_truth, CHANNEL_CALLS[rel], seed=66 + list(CHANNEL_CALLS).index(rel))
        sf.write(out, signal, SAMPLE_RATE)
        if rel in SIDECARS:
            out.with_name(out.name + ".json").write_text(json.dumps(SIDECARS[rel]) + "\n")
        truth[rel] = {
            "duration_s": round(len(signal) / SAMPLE_RATE, 3),
            "speakers": sorted({t["speaker"] for t in turns_truth}),
            "turns": turns_truth,
        }
    return truth


def main() -> None:
    check_vocabulary()
    rng = np.random.default_rng(20260115)
    audio_dir = ROOT / "audio" / PARTITION
    truth_dir = ROOT / "truth"
    for path in (audio_dir, truth_dir):
        path.mkdir(parents=True, exist_ok=True)
    truth = write_dialogues(DIALOGUES, audio_dir, rng)
    rel, seconds = SILENT_UNIT
    silence = rng.normal(0.0, 0.002, size=int(seconds * SAMPLE_RATE)).astype(np.float32)
    (audio_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    sf.write(audio_dir / rel, silence, SAMPLE_RATE)
    truth[rel] = {"duration_s": seconds, "speakers": [], "turns": []}
    (truth_dir / f"{PARTITION}.json").write_text(json.dumps(truth, indent=2) + "\n")
    total = sum(u["duration_s"] for u in truth.values())
    print(f"wrote {len(truth)} units, {total:.1f} audio seconds under {audio_dir}")
    # the second day: its own seed, so the first day's files stay as they were
    second = write_dialogues(SECOND_DIALOGUES, ROOT / "audio" / SECOND_PARTITION, np.random.default_rng(20260116))
    (truth_dir / f"{SECOND_PARTITION}.json").write_text(json.dumps(second, indent=2) + "\n")
    print(f"wrote {len(second)} units under {ROOT / 'audio' / SECOND_PARTITION}")
    # the third day (languages): its own seed; each unit's truth names its language
    third = write_dialogues({rel: turns for rel, (_, turns) in THIRD_DIALOGUES.items()},
                            ROOT / "audio" / THIRD_PARTITION, np.random.default_rng(20260117))
    for rel, (language, _) in THIRD_DIALOGUES.items():
        third[rel]["language"] = language
    (truth_dir / f"{THIRD_PARTITION}.json").write_text(json.dumps(third, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {len(third)} units under {ROOT / 'audio' / THIRD_PARTITION}")

if __name__ == "__main__":
    main()
