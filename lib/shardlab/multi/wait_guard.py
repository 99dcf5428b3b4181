"""The wait guard: every wait of a controller in a group ends, and a failed wait names a process.

Three mechanisms share the coordination service's key-value store:

- pulses: a thread overwrites `pulse/<id>` with a counter and this controller's position
  every PULSE seconds; a controller whose counter stops advancing is lost;
- agreement: before each step every controller publishes `agree/<step>/<id>` (batch hash and
  sampler digest, then `#` and its flags: a preemption request, a finished background save)
  and reads everyone else's within the bound; a missing entry is diagnosed, a different digest
  is a SamplerMismatchError, and every controller sees every flag, so all take the same branch;
- a watchdog: a blocking call that cannot be interrupted (a collective, an Orbax save) runs
  under `bounded`; past the deadline the watchdog diagnoses, reports and ends the process.
"""

import os
import threading
import time
from contextlib import contextmanager

from shardlab.core import files
from shardlab.errors import HangError, LostProcessError, SamplerMismatchError, ShardlabError

PULSE = 0.5  # seconds between pulses
PULSE_WINDOW = 3.0  # seconds a diagnosis watches the pulses: a live process pulses ~6 times in it
FLAGS = "#"  # separates the compared digest from a controller's flags in an agreement entry
PREFIX = "shardlab"
EXIT_STOPPED = 3  # exit code of a controller that stopped itself with a named error
TIMEOUT = 10.0  # seconds: the bound of every wait of a group whose runner names none (supervise, drills)


class WaitGuard:
    """Pulses, agreement and a watchdog for one controller; `report(error)` records a stop."""

    def __init__(self, client, process_id: int, processes: int, timeout: float, report, pulse_file=None):
        self.client, self.process_id, self.processes = client, process_id, processes
        self.pulse_file = pulse_file  # also pulsed to a file, for a supervisor outside the group
        self.timeout, self.report = float(timeout), report
        self.position = "start"
        self._deadline, self._what, self._stop = None, None, threading.Event()
        sinks = (self._pulse_to_store,) + ((self._pulse_to_file,) if pulse_file else ())
        self._threads = [threading.Thread(target=self._pulse, args=(send,), daemon=True) for send in sinks]
        self._threads.append(threading.Thread(target=self._watch, daemon=True))
        for thread in self._threads:
            thread.start()

    @property
    def others(self) -> list[int]:
        """Every process id but this one."""
        return [q for q in range(self.processes) if q != self.process_id]

    def close(self) -> None:
        """Stop the pulse and watchdog threads."""
        self._stop.set()

    def _pulse(self, send) -> None:
        """Send `<count>|<position>` every PULSE seconds until closed; each sink pulses in its own thread,
        so a frozen coordinator, which blocks `key_value_set`, does not stop the file's pulse."""
        count = 0
        while not self._stop.is_set():
            count += 1
            send(f"{count}|{self.position}")
            self._stop.wait(PULSE)

    def _pulse_to_store(self, text: str) -> None:
        try:
            self.client.key_value_set(f"{PREFIX}/pulse/{self.process_id}", text, allow_overwrite=True)
        except Exception:
            pass  # the coordinator is gone; a waiting call will diagnose it

    def _pulse_to_file(self, text: str) -> None:
        try:
            files.replace(self.pulse_file, text)
        except OSError:
            pass  # a missing pulse is what the group supervisor reports; never stop training for it

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                error = self.diagnose(self._what)
                self.report(error)
                self.linger(error)
                os._exit(EXIT_STOPPED)

    @contextmanager
    def bounded(self, what: str, timeout: float | None = None):
        """Run an uninterruptible blocking call; past `timeout` the watchdog stops the process.

        A call that fails instead (a collective whose peer closed its connection) is diagnosed
        the same way, so the error names the process either way.
        """
        self._what, self._deadline = what, time.monotonic() + (timeout or self.timeout)
        try:
            yield
        except ShardlabError:
            raise
        except Exception as exc:
            self._deadline = None
            raise self.diagnose(what, failure=f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        finally:
            self._deadline = None

    def _pulses(self) -> dict[int, tuple[str, str]]:
        found = {}
        for key, value in self.client.key_value_dir_get(f"{PREFIX}/pulse/"):
            count, _, position = value.partition("|")
            found[int(key.rsplit("/", 1)[-1])] = (count, position)
        return found

    def _published(self) -> dict[int, set[int]]:
        steps: dict[int, set[int]] = {}
        for key, _ in self.client.key_value_dir_get(f"{PREFIX}/agree/"):
            step, pid = key.split("/")[-2:]
            if step.isdigit():
                steps.setdefault(int(step), set()).add(int(pid))
        return steps

    def diagnose(self, what: str, failure: str | None = None) -> ShardlabError:
        """Name the process behind a failed wait: lost (no pulse) or out of step (skipped a step)."""
        bound = (
            f"{what} failed ({failure})" if failure else f"{what} did not complete within the {self.timeout:g} s bound"
        )
        try:
            first = self._pulses()
            time.sleep(PULSE_WINDOW)
            second = self._pulses()
            published = self._published()
        except Exception as exc:
            return _naming([0], LostProcessError)(
                f"process(es) [0] lost: {bound}, and process {self.process_id} can no longer reach the "
                f"coordination service that process 0 hosts ({type(exc).__name__}). Stop the group and "
                "restart it from the newest complete checkpoint."
            )
        lost = [q for q in self.others if q not in second or second[q][0] == first.get(q, (None,))[0]]
        if lost:
            return _naming(lost, LostProcessError)(
                f"process(es) {lost} lost: {bound}, and they stopped sending pulses (killed, crashed or "
                f"unreachable; expected pulses from all {self.processes} processes). Stop the group and "
                "restart it from the newest complete checkpoint."
            )
        positions = {q: second[q][1] for q in sorted(second)}
        for step in sorted(published):
            later = set().union(*(pids for s, pids in published.items() if s > step))
            skipped = sorted(q for q in range(self.processes) if q not in published[step] and q in later)
            if skipped:
                return HangError(
                    f"process(es) {skipped} skipped step {step}: {bound}; they never reported step {step} but "
                    f"reported a later one, so they missed its all-reduce and the others would wait forever. "
                    f"Positions: {positions}. Stop the group, fix the skipping controller and restart from the "
                    "newest complete checkpoint."
                )
        return HangError(
            f"group out of step: {bound} although every process is alive; positions: {positions}. Stop the "
            "group and restart from the newest complete checkpoint."
        )

    def linger(self, error: Exception) -> None:
        """Announce this stop; process 0, which hosts the coordinator, waits (bounded) for the others' reports.

        Without this, process 0 exiting first would take the coordination service with it and
        JAX would abort the others before they could record their own named error.
        """
        try:
            self.client.key_value_set(f"{PREFIX}/stopped/{self.process_id}", type(error).__name__)
        except Exception:
            return
        if self.process_id != 0:
            return
        deadline = time.monotonic() + self.timeout
        for q in self.others:
            if q in getattr(error, "lost", ()):
                continue
            try:
                remaining = max(1, int(1000 * (deadline - time.monotonic())))
                self.client.blocking_key_value_get(f"{PREFIX}/stopped/{q}", remaining)
            except Exception:
                return

    def agree(self, step: int, value: str, timeout: float | None = None, flags: str = "") -> dict[int, str]:
        """Publish this step's digest (and flags); raise unless every digest is the same; return everyone's flags."""
        self.client.key_value_set(f"{PREFIX}/agree/{step}/{self.process_id}", f"{value}{FLAGS}{flags}")
        deadline = time.monotonic() + (timeout or self.timeout)
        found = {self.process_id: (value, flags)}
        for q in self.others:
            remaining = max(1, int(1000 * (deadline - time.monotonic())))
            try:
                entry = self.client.blocking_key_value_get(f"{PREFIX}/agree/{step}/{q}", remaining)
            except Exception:
                raise self.diagnose(f"agreement on step {step} (waiting for process {q})") from None
            digest, _, their_flags = entry.partition(FLAGS)
            found[q] = (digest, their_flags)
        odd = sorted(q for q, (v, _) in found.items() if v != found[0][0])
        if odd:
            raise SamplerMismatchError(
                f"step {step}: process(es) {odd} report batch/sampler digest "
                f"{[found[q][0] for q in odd]} but process 0 reports {found[0][0]!r}; the host sampler must be "
                "identical on every controller. Stop the group and restart from the newest complete checkpoint."
            )
        return {q: f for q, (_, f) in sorted(found.items())}

    def barrier(self, name: str) -> None:
        """Wait until every process reaches `name`, within the bound."""
        try:
            self.client.wait_at_barrier(f"{PREFIX}/{name}", int(1000 * self.timeout))
        except Exception:
            raise self.diagnose(f"barrier {name!r}") from None


def _naming(lost: list[int], kind):
    """A constructor of `kind` whose instances carry the lost process ids (for `linger`)."""

    def make(message: str) -> ShardlabError:
        error = kind(message)
        error.lost = tuple(lost)
        return error

    return make
