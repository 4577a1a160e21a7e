"""fk's results model: the vocabularies (``status``), typed records of every results file (``records``), how a
file is read as its record (``load``) and the verdict policy (``verdict``)."""
from fk_adapters.results.load import NotResults, as_record, from_dict, kind_of, load
from fk_adapters.results.records import (
                                         SCHEMA_VERSION,
                                         Capture,
                                         CaptureFailure,
                                         CheckResults,
                                         CompareResults,
                                         CoverageReport,
                                         Record,
                                         RunResults,
                                         SideBySide,
                                         stamp,
)
from fk_adapters.results.status import (
                                         CheckStatus,
                                         DeltaVerdict,
                                         KernelChange,
                                         Kind,
                                         ScenarioStatus,
                                         SlotEvidence,
                                         Verdict,
)

__all__ = ["SCHEMA_VERSION", "Capture", "CaptureFailure", "CheckResults", "CheckStatus", "CompareResults",
           "CoverageReport", "DeltaVerdict", "Kind", "KernelChange", "NotResults", "Record", "RunResults",
           "ScenarioStatus", "SideBySide", "SlotEvidence", "Verdict", "as_record", "from_dict", "kind_of", "load",
           "stamp"]
