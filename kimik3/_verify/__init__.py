"""``kimik3 verify``: Moonshot's K3 endpoint contract, checked from the client (see
:func:`verify` and docs/verify.md)."""

from ._checks import CheckResult, VerifyReport, averify, malformed_requests, verify, walle_schemas
from ._probes import CONVENTIONS, Convention, Probe, expected_counts, probes

__all__ = [
    "CONVENTIONS",
    "CheckResult",
    "Convention",
    "Probe",
    "VerifyReport",
    "averify",
    "expected_counts",
    "malformed_requests",
    "probes",
    "verify",
    "walle_schemas",
]
