"""Dagster's private reaches in one place: a run's coordinator sleeps while a step waits for a pool slot, and
the modules a forked step process would otherwise import to open the instance.

Why: Dagster 1.13.27's multiprocess executor loops over its steps without sleeping while one waits for a `gpu` pool
slot: `InstanceConcurrencyContext.claim` answers False at once until the claim's next check is due, and the loop
asks again. Measured: a `batch-assets run` blocked on the pool (another run's GPU step holding the slot) kept its
process at about 98 % of a core for as long as it waited, on a machine whose cores the GPU step needs.

`install_pool_wait_sleep()` wraps `claim` (`_claim_after_a_nap`): a step whose claim is still waiting for its next
check sleeps `NAP_S` (never past that check) before Dagster's own answer, so the loop wakes ten times a second. It
is installed with the executor (`orchestration/executor.py`), in every process that builds the definitions (the
CLI's, a run worker's). It replaces only the function it was written against (`DAGSTER_CLAIM_SHA256`, its source);
any other leaves Dagster as it is and says so, and `tests/test_reliability.py` fails on the upgrade so that someone
looks (Dagster may sleep there itself: then drop this).

`INSTANCE_STORAGE_MODULES`: what `DagsterInstance.from_ref` imports for the SQLite and PostgreSQL storages (about
1.5 s of a step process's CPU here), for the local executor's forkserver to import once per run
(`orchestration/executor.py`). multiprocessing skips a preload module that does not import, so a Dagster that moved
them costs only that time again; `tests/test_reliability.py` fails then.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import time

CONCURRENCY_MODULE = "dagster._core.execution.plan.instance_concurrency_context"
DAGSTER_VERSION = "1.13.27"
# sha256 of `inspect.getsource(InstanceConcurrencyContext.claim)` in Dagster 1.13.27
DAGSTER_CLAIM_SHA256 = "8375daa833c671e54e6ec523809a8e26d6baffd6dbaa01ccfc0d824c06cd7124"
NAP_S = 0.1
INSTANCE_STORAGE_MODULES = ("dagster._core.storage.sqlite_storage", "dagster_postgres")
_log = logging.getLogger(__name__)
_ORIGINAL: list = []


class DagsterChanged(RuntimeError):
    """Dagster's `claim` is not the one this adapter was written against."""


def dagster_claim():
    """Dagster's own `InstanceConcurrencyContext.claim`, checked (`DagsterChanged` otherwise)."""
    try:
        context = importlib.import_module(CONCURRENCY_MODULE).InstanceConcurrencyContext
        original = _ORIGINAL[0] if _ORIGINAL else context.claim
        digest = hashlib.sha256(inspect.getsource(original).encode()).hexdigest()
    except (ImportError, AttributeError, OSError, TypeError) as error:
        raise DagsterChanged(f"{CONCURRENCY_MODULE}.InstanceConcurrencyContext.claim is not readable as in Dagster "
                             f"{DAGSTER_VERSION} ({type(error).__name__}: {error}): check whether the executor still "
                             "spins while a step waits for a pool slot and update "
                             "batch_assets/orchestration/dagster_adapter.py") from None
    if digest != DAGSTER_CLAIM_SHA256:
        raise DagsterChanged(f"InstanceConcurrencyContext.claim changed since Dagster {DAGSTER_VERSION} (source sha256 "
                             f"{digest[:16]}…): check whether the executor still spins while a step waits for a pool "
                             "slot (fixed upstream: drop the adapter) and update "
                             "batch_assets/orchestration/dagster_adapter.py")
    return context, original


def _claim_after_a_nap(self, concurrency_key: str, step_key: str, step_priority: int = 0) -> bool:
    """Dagster's `claim`, after a nap of at most `NAP_S` while the step's claim waits for its next check."""
    if step_key in self._pending_claims and step_key in self._pending_timeouts:
        nap = min(NAP_S, self._pending_timeouts[step_key] - time.time())
        if nap > 0:
            time.sleep(nap)
    return _ORIGINAL[0](self, concurrency_key, step_key, step_priority)


def install_pool_wait_sleep() -> bool:
    """Wrap Dagster's `claim` (once per process); True when installed by this call. A Dagster whose `claim` is not
    the known one is left as it is, with a warning."""
    if _ORIGINAL:
        return False
    try:
        context, original = dagster_claim()
    except DagsterChanged as error:
        _log.warning("pool wait sleep not installed, a run waiting for a pool slot spins a core: %s", error)
        return False
    _ORIGINAL.append(original)
    context.claim = _claim_after_a_nap
    return True
