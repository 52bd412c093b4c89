"""Stubs for ``remora._native.kv`` (``crates/py/src/kv.rs``)."""
from typing import Any, Callable, Optional, TypedDict, Union

class MigrationStep(TypedDict):
    """What a ``progress`` callable receives, once per step."""
    state: str
    present: int
    units: int
    bytes: int
    downtime_ms: Optional[float]
    elapsed: float

class MigrationResult(TypedDict):
    downtime_ms: Optional[float]
    total_s: float
    bytes: int

def migrate(source: str, target: str, secret: str, wait: float = 60.0,
            progress: Union[bool, Callable[[MigrationStep], Any]] = True) -> MigrationResult: ...
def migration_stats(address: str) -> dict[str, str]: ...
