"""Stubs for ``remora._native.kv`` (``crates/py/src/kv.rs``, ``crates/py/src/kv_client.rs``)."""
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

class Item(TypedDict):
    """What ``Client.get_item`` returns for a present key."""
    value: bytes
    flags: int
    cas: int
    exptime: int

class ClientStats(TypedDict):
    one_sided: bool
    reads: int
    fallbacks: int
    reconnects: int

class Client:
    def __init__(self, addr: str, one_sided: bool = True, transport: str = "udp") -> None: ...
    def get(self, key: Union[bytes, str]) -> Optional[bytes]: ...
    def get_item(self, key: Union[bytes, str]) -> Optional[Item]: ...
    def get_many(self, keys: list[Union[bytes, str]]) -> dict[Union[bytes, str], bytes]: ...
    def set(self, key: Union[bytes, str], value: bytes, flags: int = 0,
            exptime: int = 0) -> bool: ...
    def delete(self, key: Union[bytes, str]) -> bool: ...
    def stats(self) -> ClientStats: ...
