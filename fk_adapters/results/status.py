"""The vocabularies of fk's results: one ``str`` enum each, so a member is the very string results files hold."""
from __future__ import annotations

from enum import Enum

from fk_adapters import stats


class Vocabulary(str, Enum):
    """A str enum that prints, formats and hashes as its value (as a plain string would)."""

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__


class Kind(Vocabulary):
    """What a results file holds (its ``kind`` key; inferred from its keys for files written before it)."""
    RUN = "run"  # fk run on one engine
    RUNS = "runs"  # fk run on several engines: one candidate side by side
    CHECK = "check"  # fk check
    CAPTURE = "capture"  # an fk capture workload file
    CAPTURE_FAILURE = "capture-failure"  # fk capture: the engine could not serve the scenario
    COMPARE = "compare"  # fk compare's JSON output
    COVERAGE = "coverage"  # fk coverage's JSON output


class ScenarioStatus(Vocabulary):
    """The status of one scenario of an ``fk run``."""
    PASSED = "PASSED"
    INCORRECT = "INCORRECT"
    INCONCLUSIVE = "INCONCLUSIVE"  # correctness failed and its float32 reference could not judge
    NOT_EXERCISED = "NOT_EXERCISED"
    LOAD_ERROR = "LOAD_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    NOT_APPLICABLE = "NOT_APPLICABLE"  # no selected slot has a layer in the model: the candidate ran the stock model
    NOT_PROVEN = "NOT_PROVEN"  # a kernel declares profiler names that cannot prove it ran (kernel_names.unproven)


class SlotEvidence(Vocabulary):
    """Did a selected kernel run in one scenario (``evidence.judge``)."""
    EXERCISED = "exercised"
    NOT_EXERCISED = "not exercised"  # the model built a layer for the slot, no proof the kernel ran
    NOT_PROVEN = "not proven"  # its profiler names cannot prove it ran
    NOT_APPLICABLE = "n/a"  # no layer the model built routes to the slot
    NOT_JUDGED = "not judged"  # the run failed before a worker reported
    ABSENT = "absent"  # fk compare: the slot has no evidence on this side


class CheckStatus(Vocabulary):
    """The status of one (workload, plugin, slot) of an ``fk check``."""
    PASSED = "PASSED"
    INCORRECT = "INCORRECT"
    NOT_OFFERED = "NOT_OFFERED"  # the plugin has no kernel for the slot
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"


class Verdict(Vocabulary):
    """The verdict of a whole run, check or comparison."""
    PASS = "PASS"
    FAIL = "FAIL"
    INCOMPLETE = "INCOMPLETE"  # fk compare: nothing wrong found, but a shared scenario's performance was not compared


class DeltaVerdict(Vocabulary):
    """fk compare's verdict on one performance delta."""
    FASTER = stats.FASTER
    SLOWER = stats.SLOWER
    NO_CHANGE = stats.NO_CHANGE
    NOT_COMPARED = "not compared"  # no delta: a side's timings were disturbed
    NOT_JUDGED = "not judged"  # too few rounds and no noise floor: the variation between processes is unknown
    TOO_NOISY = "too noisy"  # no significant change, but a regression past --max-margin is not ruled out either


class KernelChange(Vocabulary):
    """fk compare: how a slot's kernel changed from BASE to HEAD."""
    NONE = ""
    STARTED = "started"
    STOPPED = "stopped"  # exercised in BASE, present but not exercised in HEAD
    REMOVED = "removed"  # exercised in BASE, no kernel installed in HEAD
