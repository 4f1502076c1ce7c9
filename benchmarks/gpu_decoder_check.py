"""Lever 3 on a real GPU: NeMo TDT greedy decoding with and without CUDA graphs, asserted and compared.

Runs the project's own decoder-mode code (`batch_assets.gpu.asr.transcribe`, through
`batch_assets.gpu.asr.decoder_check`, which the `gpu` test uses too) on the tiny TDT model placed on the device:
graphs on (the decoder must be in a graphs mode and have captured a graph after the call), graphs off (no graphs
mode), graphs on again, identical words and word times across modes, and two ways of changing the decoder behind the
section's back (a real `change_decoding_strategy` call, and NeMo's runtime `disable_cuda_graphs()`), each of which
must be caught. Prints a JSON report.

    python benchmarks/gpu_decoder_check.py [--device cuda] [--out report.json]
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sys

from batch_assets.gpu.asr.decoder_check import decode_in_mode, folder_audio, segments_of, word_key
from batch_assets.gpu.asr.transcribe import DecoderModeError, apply_decoder_mode, check_decoder_mode
from batch_assets.models.tiny_asr import build_tiny_tdt

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from report import cuda_peak_mib, emit  # noqa: E402


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    device = torch.device(args.device)
    report: dict = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    model = build_tiny_tdt(seed=20260115).to(device).eval()
    audio = folder_audio(REPO / "sample_data" / "audio")
    segments = segments_of(audio, 10.0)
    report["segments"] = len(segments)
    settings = None
    runs, words = [], {}
    for label, enabled in (("on", True), ("off", False), ("on_again", True), ("off_again", False)):
        settings, words[label], info = decode_in_mode(model, device, enabled, audio, segments, args.batch, settings)
        runs.append(info | {"run": label})
    report["runs"] = runs
    report["identical_words_across_modes"] = all(word_key(words[k]) == word_key(words["on"]) for k in words)

    caught = {}
    decoding = copy.deepcopy(model.cfg.decoding)
    decoding.greedy.use_cuda_graph_decoder = True
    model.change_decoding_strategy(decoding, verbose=False)  # behind the back of a run that asked for "off"
    try:
        apply_decoder_mode(model, False, settings)
        caught["change_decoding_strategy"] = None
    except DecoderModeError as error:
        caught["change_decoding_strategy"] = str(error)
    settings = apply_decoder_mode(model, True, None)
    computer = model.decoding.decoding.decoding_computer
    computer.disable_cuda_graphs()  # NeMo's runtime toggle, which timestamps requests would silently undo
    try:
        check_decoder_mode(model, device, True, "before")
        caught["disable_cuda_graphs"] = None
    except DecoderModeError as error:
        caught["disable_cuda_graphs"] = str(error)
    report["tampering_caught"] = caught
    report["cuda_peak_memory_mib"] = cuda_peak_mib(torch, device)
    emit(report, args.out)


if __name__ == "__main__":
    main()
