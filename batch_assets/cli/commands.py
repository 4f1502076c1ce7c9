"""`batch-assets run`: run the job `transcribe_partition` (six assets and their checks) for a partition;
`batch-assets show`: print a partition's speaker-attributed transcripts from its tables;
`batch-assets export`: write them as SRT, WebVTT, text, WhisperX JSON or RTTM files;
`batch-assets models fetch`: fill the model caches once (what the Kubernetes model-cache Job runs).

Runs on the embedded default: local files (the bundled sample partition unless
BATCH_ASSETS_SOURCE_URL says otherwise), the SQLite instance under `dagster_home/` (so the runs show up
in `dagster dev` afterwards), and the offline builtin models. The job runs on the instance with its
own executor (one process per step), tags and checks, exactly as the schedule or a UI launch runs it.
Before it launches, runs of this instance whose processes died are failed and their gpu slots freed. Ctrl-C
(or SIGTERM) ends a run within 30 s, a second Ctrl-C within about 2 s, with nothing left held (`cli/stopping.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import signal
import sys
import time
import uuid

from batch_assets.cli.run_flags import RUN_SETTINGS, apply_run_settings, positive_int, run_config_of
from batch_assets.cli.stopping import StopGuard, free_finished_run, operator_stop, request_cancel, stop_run, stopped_as
from batch_assets.exports.formats import FORMATS
from batch_assets.models.languages import LanguageError, run_language
from batch_assets.settings import SettingError, current_routing
from batch_assets.source.channels import MODES
from batch_assets.storage.resource import DEFAULT_SOURCE_URL, REPO_ROOT, SAMPLE_PARTITION


@contextlib.contextmanager
def console(verbose: bool, log_dir: pathlib.Path):
    """(terminal, log path): `terminal` (`run_output.Terminal`) prints to the terminal. Unless `verbose`, everything
    else this process and the run's step processes write (Dagster's event log, library warnings) goes to the log
    file instead."""
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = os.fdopen(os.dup(1), "w", buffering=1)
    saved = os.dup(1), os.dup(2)
    path = None
    if not verbose:
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / time.strftime("batch-assets-run-%Y%m%dT%H%M%S.log")
        log = path.open("ab")
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        log.close()
    try:
        from batch_assets.cli.run_output import Terminal

        yield Terminal(terminal, live=None if not verbose else False), path  # verbose: Dagster writes there too
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        terminal.close()


GPU_AND_EXPORTS = ("vad_scores", "diarization", "transcripts", "transcript_exports")


def run(partition: str, last: str | None = None, run_config: dict | None = None, verbose: bool = False,
        units: list[str] | None = None) -> int:
    """Run `transcribe_partition` for one partition, or (with `last`) every partition from `partition` to
    `last` in one run, as a backfill run does: the models are loaded once for all of them. Prints each GPU
    step's progress (a line per committed flight), one line per step, the checks and a summary; the event log
    goes to a file under $DAGSTER_HOME/logs (`verbose`: live). `units`: rerun only these units of the partition
    (the GPU assets and the exports; other units' rows kept). SIGINT or SIGTERM ends it within 30 s, a second
    within about 2 s (`cli/stopping.py`): 130 or 143 is returned."""
    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / "dagster_home"))
    import dagster as dg

    from batch_assets.cli.run_output import LAUNCH_TAG, RunWatcher, builtin_model_note, failure_text, partition_summary
    from batch_assets.definitions import storage_from_env
    from batch_assets.orchestration.dead_runs import free_dead_runs
    from batch_assets.orchestration.executor import stop_run_forkserver
    from batch_assets.orchestration.partitions import PartitionKeyError, check_partition_key, daily_partitions

    try:
        partitions = [check_partition_key(partition)] if last is None else daily_partitions.get_partition_keys_in_range(
            dg.PartitionKeyRange(check_partition_key(partition), check_partition_key(last)))
    except PartitionKeyError as error:
        print(f"batch-assets: {error}", file=sys.stderr)
        return 2
    if last is not None and last < partition:
        print(f"batch-assets: --through {last} is before --partition {partition}: give the first day to "
              "--partition and the last to --through", file=sys.stderr)
        return 2
    if units and last is not None:
        print("batch-assets: --units reruns some units of one partition: drop --through", file=sys.stderr)
        return 2
    if last is None:
        tags = {"dagster/partition": partition}
    else:
        tags = {"dagster/asset_partition_range_start": partition, "dagster/asset_partition_range_end": last}
    tags[LAUNCH_TAG] = uuid.uuid4().hex
    instance = dg.DagsterInstance.get()
    free_dead_runs(instance, lambda message: print(f"batch-assets: {message}", file=sys.stderr))
    storage = storage_from_env()
    days = partition if last is None else f"{partition} to {last}"
    with console(verbose, pathlib.Path(os.environ["DAGSTER_HOME"]) / "logs") as (terminal, log_path):
        emit = terminal.line
        emit(f"batch-assets: transcribe_partition for {days}: {storage.source_url} -> {storage.storage_url}")
        if log_path:
            emit(f"batch-assets: Dagster's event log and library warnings: {log_path} (--verbose shows them here)")
        watcher = RunWatcher(instance, tags[LAUNCH_TAG], emit, terminal.status).start()
        guard = StopGuard(lambda name: stop_run(tags[LAUNCH_TAG], partitions, storage, name, emit, guard.finished),
                          emit, first=lambda name: operator_stop(name) and request_cancel(tags[LAUNCH_TAG], name))
        watcher.stopping = lambda: bool(guard.signals)
        started = time.perf_counter()
        try:
            selection = [dg.AssetKey(a) for a in GPU_AND_EXPORTS] if units else None
            with guard.watching():
                try:
                    result = dg.execute_job(dg.reconstructable(transcribe_partition_job), instance=instance,
                                            tags=tags, run_config=run_config, asset_selection=selection)
                finally:  # the next run in this process forks its steps from a forkserver of its own
                    stop_run_forkserver(guard.before)
        except (KeyboardInterrupt, dg.DagsterExecutionInterruptedError):  # Dagster stopped the run its own way
            watcher.stop()
            emit(failure_text(watcher, str(log_path) if log_path else None,
                              stopped_as(instance, tags[LAUNCH_TAG], guard.signals or [signal.SIGINT])))
            return 128 + (guard.signals or [signal.SIGINT])[0]
        finally:
            watcher.stop()
            if freed := free_finished_run(instance, tags[LAUNCH_TAG]):
                emit(f"batch-assets: freed {freed} gpu pool slot(s) the ended run still claimed (a step stopped "
                     "before it reported its end)")
        wall_s = time.perf_counter() - started
        if watcher.checks:
            emit("checks:")
            for check in watcher.checks:
                emit(check.text())
        if not result.success:
            ended = stopped_as(instance, tags[LAUNCH_TAG], guard.signals) if guard.signals else "failed"
            emit(failure_text(watcher, str(log_path) if log_path else None, ended))
            return 128 + guard.signals[0] if guard.signals else 1  # stopped by a signal: the shell's convention
        for key in partitions:
            emit(partition_summary(storage, key))
        gpu = watcher.materialized.get("transcripts", {})
        models = gpu.get("models") or {}
        routing = ", ".join(f"{lang}={model}" for lang, model in (models.get("asr") or {}).items()) or "?"
        emit(f"run {result.run_id} succeeded in {wall_s:.1f} s: asr {routing}, language id "
             f"{models.get('language_id', '?')}, diarization {models.get('diarization', '?')}, device "
             f"{gpu.get('device', '?')}")
        if note := builtin_model_note(models, storage.source_url, DEFAULT_SOURCE_URL):
            emit(note)
        first = partitions[0]
        emit("next:")
        emit(f"  batch-assets show --partition {first}                        speaker-attributed transcripts")
        emit(f"  batch-assets export --partition {first} --format all --out exports/   SRT, WebVTT, text, JSON, RTTM")
        emit("  make dev                                                          "
             "the UI (http://127.0.0.1:3000), this run in it")
        if log_path:
            emit(f"  less {log_path}")
    return 0


def transcribe_partition_job():
    """The job as `dg.reconstructable` needs it: a module-level function of an importable module."""
    from batch_assets.definitions import transcribe_partition

    return transcribe_partition()


def show(partition: str, unit: str | None = None) -> int:
    """Print a partition's (or one unit's) speaker-attributed transcript from the tables, as the UI shows it."""
    from batch_assets.definitions import storage_from_env
    from batch_assets.exports import transcript_text
    from batch_assets.orchestration.partitions import PartitionKeyError, check_partition_key

    storage = storage_from_env()
    try:
        check_partition_key(partition)
        units = storage.read_parquet("transcripts", partition, "units")
        words = storage.read_parquet("transcripts", partition, "words")
        blocks = transcript_text.partition_units(units, words, unit, max_chars_per_unit=10**9)
    except (PartitionKeyError, FileNotFoundError, KeyError) as error:
        print(f"batch-assets: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 2
    print(f"partition {partition}: {len(units)} units, {len(words)} words "
          f"({storage.output_url('transcripts', partition)})\n")
    for block in blocks:
        print("\n".join(block) + "\n")
    return 0


def export(partition: str, unit: str | None, format_: str, out: str) -> int:
    """Write a partition's (or one unit's) transcripts as files: `{out}/{unit_id}.{srt,vtt,txt,json,rttm}`."""
    from batch_assets.definitions import storage_from_env
    from batch_assets.exports.assets import export_frames, read_transcripts
    from batch_assets.orchestration.partitions import PartitionKeyError, check_partition_key

    storage = storage_from_env()
    try:
        check_partition_key(partition)
        files = export_frames(read_transcripts(storage, partition), unit, FORMATS if format_ == "all" else format_)
    except (PartitionKeyError, FileNotFoundError, KeyError) as error:
        print(f"batch-assets: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 2
    folder = pathlib.Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    units = len({name.rsplit(".", 1)[0] for name in files})
    print(f"batch-assets: wrote {len(files)} file(s) for {units} unit(s) of {partition} to {folder}/")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The `batch-assets` command; a setting that does not parse is one line naming it, not a traceback."""
    try:
        return _main(argv)
    except SettingError as error:
        print(f"batch-assets: {error}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="batch-assets", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="materialize all six assets for one partition and print a summary")
    run_parser.add_argument("--partition", default=SAMPLE_PARTITION,
                            help=f"YYYY-MM-DD (default: the sample, {SAMPLE_PARTITION})")
    run_parser.add_argument("--through", help="YYYY-MM-DD: run every partition from --partition to this one in one run")
    for flag, variable, default, what in RUN_SETTINGS:
        run_parser.add_argument(flag, metavar=variable.removeprefix("BATCH_ASSETS_").split("_")[-1],
                                help=f"{what} (sets {variable}; default: {default})")
    run_parser.add_argument("--units", nargs="+", metavar="U",
                            help="rerun only these units of the partition (unit_id or key under the partition folder): "
                            "the GPU assets and the exports run, every other unit's rows are kept")
    for hint, what in (("num-speakers", "exactly N"), ("min-speakers", "at least N"), ("max-speakers", "at most N")):
        run_parser.add_argument(f"--{hint}", type=positive_int, metavar="N",
                                help=f"{what} speakers in every unit without a sidecar "
                                f"(gpu_section's {hint.replace('-', '_')})")
    run_parser.add_argument("--language", metavar="CODE",
                            help="the language of every unit without a sidecar language: an ISO 639-1 code with an "
                            "ASR model (BATCH_ASSETS_ASR_MODELS), or auto (default: detect each unit's)")
    run_parser.add_argument("--channels", choices=MODES, help="how each multichannel unit without a sidecar choice is "
                            "read (gpu_section's channels; default: BATCH_ASSETS_CHANNELS, auto)")
    run_parser.add_argument("--verbose", action="store_true",
                            help="show Dagster's event log and library warnings live instead of in the log file")
    run_parser.add_argument("--allow-shrink", action="store_true",
                            help="replace the partition's results even if the source now lists far fewer units")
    run_parser.add_argument("--allow-degrade", action="store_true",
                            help="publish even if most units with transcripts would become fetch_failed, failed, "
                            "changed_since_listed, undecodable or unsupported_language (or every unit of a first-time "
                            "day fails for one reason)")
    show_parser = sub.add_parser("show", help="print a partition's speaker-attributed transcripts from the tables")
    show_parser.add_argument("--partition", default=SAMPLE_PARTITION,
                             help=f"YYYY-MM-DD (default: the sample, {SAMPLE_PARTITION})")
    show_parser.add_argument("--unit", help="only this unit (unit_id or its key under the partition folder)")
    export_parser = sub.add_parser("export",
                                   help="write a partition's transcripts as SRT, WebVTT, text, JSON or RTTM files")
    export_parser.add_argument("--partition", default=SAMPLE_PARTITION,
                               help=f"YYYY-MM-DD (default: the sample, {SAMPLE_PARTITION})")
    export_parser.add_argument("--unit", help="only this unit (unit_id or its key under the partition folder)")
    export_parser.add_argument("--format", default="all", choices=[*FORMATS, "all"])
    export_parser.add_argument("--out", default="exports",
                               help="folder to write {unit_id}.{format} into (default: exports)")
    dev_parser = sub.add_parser("dev", help="dagster dev (webserver + daemon) that stops cleanly on Ctrl-C or SIGTERM")
    dev_parser.add_argument("--host", default="127.0.0.1")
    dev_parser.add_argument("--port", type=int, default=3000)
    models_parser = sub.add_parser("models", help="the model caches")
    models_parser.add_argument("action", choices=["fetch"],
                               help="fetch: load the configured models once, filling the caches")
    args = parser.parse_args(argv)
    if args.command == "models":
        from batch_assets.cli.models_fetch import fetch_models

        return fetch_models()
    if args.command == "dev":
        from batch_assets.cli.dev_server import dev

        return dev(args.host, args.port)
    if args.command == "show":
        return show(args.partition, args.unit)
    if args.command == "export":
        return export(args.partition, args.unit, args.format, args.out)
    apply_run_settings(args)
    hints = {key: getattr(args, key) for key in ("num_speakers", "min_speakers", "max_speakers")
             if getattr(args, key) is not None} | ({"channels": args.channels} if args.channels else {})
    if args.language is not None:  # refused before any work: a code with no ASR model, or not a code at all
        try:
            run_language(args.language, current_routing(), "--language")
        except LanguageError as error:
            parser.error(str(error))
        hints["language"] = args.language.strip().lower()
    return run(args.partition, args.through, run_config_of(args.allow_shrink, args.allow_degrade, args.units, hints),
               args.verbose, args.units)

