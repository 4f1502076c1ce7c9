"""One windowed unit's decoding stream, for the GPU step that loads its windows (`flight_audio.py`).

Why: a long unit (`long_units/windows.py`) is decoded streaming into its planned windows, holding a window, not the
recording. Its object is staged once (by the first load of one of its windows), one decoding stream cuts it into
windows in order, and each window's load decodes up to its own. Lever 1 loads flights ahead on several threads, so
windows may be asked for out of order: a window the stream passes is held until taken if this step will ask for it,
else dropped (committed by an earlier run). A unit whose channels may be read one by one (`source/channels.py`) is
cut as the mix and each channel side by side, and how it is read is decided once, on its first window. No Dagster.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import numpy as np

from batch_assets.long_units.windows import WindowSpec, split_windows
from batch_assets.source.channels import ChannelReading
from batch_assets.source.decode import TARGET_SAMPLE_RATE, DecodeError, split_mix, stream_file
from batch_assets.source.fetch import ChangedSinceListed, FetchError
from batch_assets.source.objects import ReadObject


class WindowStream:
    """One windowed unit's decoding stream: its object staged once, its windows taken as the flights ask for them.

    Lever 1 loads flights ahead on several threads, so a unit's windows may be asked for out of order: a window the
    stream passes on its way to a later one is kept until taken if this step will ask for it (`wanted`), else
    dropped (committed by an earlier run). The stream closes once every wanted window has been taken."""

    def __init__(self, stage: Callable[[], tuple[str, ReadObject, contextlib.ExitStack]], spec: WindowSpec,
                 wanted: set[int], suffix: str, keep: bool = False,
                 decide: Callable[[np.ndarray | None], ChannelReading] | None = None):
        """`keep`: cut the mix and each channel (`decode.stream_file`); `decide(channels or None)`: how the unit's
        channels are read, decided once on its first window (`reading`), whichever window is asked for."""
        self.stage, self.spec, self.wanted, self.suffix = stage, spec, set(wanted), suffix
        self.keep, self.decide, self.reading = keep, decide, None
        self.lock = threading.Lock()
        self.next, self.windows, self.read, self.stack, self.error = 0, None, None, None, None
        self.decoded, self.staged_by = 0, None  # the window whose load staged the object (its bytes are booked there)
        self.goes_on = False  # the stream holds audio past the unit's last planned window (`decoded`: all it holds)
        self.stopped: list[str] = []  # what ffmpeg said where it gave up part-way
        self.held: dict[int, tuple[float, np.ndarray]] = {}

    def take(self, window: int, last: bool = False) -> tuple[float, np.ndarray | None, Exception | None]:
        """(start_s, the window's samples or None when the stream ends before it, the stream's error). `last`: the
        unit's last planned window; a stream that goes on past it is then decoded to its end without holding it
        (`goes_on`, `decoded`: its length, which the step plans the unit again from)."""
        with self.lock:
            self.wanted.discard(window)
            try:
                if window in self.held:
                    return (*self.held.pop(window), None)
                if self.error is not None:
                    return 0.0, None, self.error
                if self.windows is None and self.next == 0:
                    path, self.read, self.stack = self.stage()
                    self.staged_by = window
                    self.windows = split_windows(stream_file(path, self.suffix, self.stopped, self.keep), self.spec)
                while self.windows is not None and self.next <= window:
                    index = self.next
                    start_s, samples = next(self.windows, (None, None))
                    self.next += 1
                    if samples is None:
                        break
                    self.decoded = round(start_s * TARGET_SAMPLE_RATE) + len(samples)
                    samples = self._as_read(samples)
                    if index == window:
                        if last:  # the listing's length cut the stream? Then decoded on to its end, counted only
                            for later_s, later in self.windows:
                                self.goes_on = True
                                self.decoded = round(later_s * TARGET_SAMPLE_RATE) + len(later)
                        return start_s, samples, None
                    if index in self.wanted:
                        self.held[index] = (start_s, samples)
                return 0.0, None, None
            except (DecodeError, FetchError, ChangedSinceListed) as error:
                self.error = error
                return 0.0, None, error
            finally:
                if not self.wanted or self.error is not None:
                    self.close()

    def _as_read(self, samples: np.ndarray) -> np.ndarray:
        """A window as its unit is read: the mix, or (channels, samples) read by channel (decided on the first)."""
        mix, each = split_mix(samples)
        if self.reading is None and self.decide is not None:
            self.reading = self.decide(each)
        return np.ascontiguousarray(each if self.reading is not None and self.reading.separate else mix)

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
            self.stack, self.windows = None, None
