"""``remora.kv``: one-sided GETs of a running ``remora kv serve`` cache, and its post-copy live
migration.

``Client(addr, one_sided=True, transport="udp")`` connects to the server's text port ``addr``,
finds the server's grant in its ``stats`` (``one_sided_grant``, when it runs with
``--one-sided HOST:PORT``) and answers ``get``, ``get_item`` and ``get_many`` by one-sided READs
of the server's arena: over ``"udp"`` (RoCEv2 datagrams, any host; the server's CPU serves the
READs in batches) or ``"shm"`` (same host: the server runs no code for a GET). What READs cannot
decide (an item being rewritten past a bound of retries, a value larger than a MiB, a long
chain), a server that grants nothing, and ``one_sided=False`` go to the text protocol's ``mg``.
``set`` and ``delete`` are always two-sided. A client follows its server through a warm restart
(``-e``) and a migration (a redirect), and asks for the grant again there::

    # shell: remora kv serve -p 11211 --one-sided 127.0.0.1:7471
    from remora import kv

    c = kv.Client("127.0.0.1:11211", transport="shm")
    c.set("greeting", b"hello", flags=3)
    assert c.get("greeting") == b"hello"
    print(c.get_item("greeting"))   # {'value': b'hello', 'flags': 3, 'cas': 1, 'exptime': 0}
    print(c.get_many(["greeting", "absent"]))   # {'greeting': b'hello'}
    print(c.stats())   # {'one_sided': True, 'reads': 4, 'fallbacks': 0, 'reconnects': 0}

A key is ``bytes`` or ``str`` (UTF-8), 1 to 250 bytes without spaces or control bytes (other
keys raise ``ValueError``); a server that cannot be reached raises ``ConnectionError``.

Post-copy live migration:

The source must run with ``-A`` (admin commands). ``migrate(source, target, secret)`` arms it
to hand its cache to the server started with ``--migrate-from SOURCE --migrate-secret-file
FILE`` (FILE holding ``secret``, 32 to 128 printable characters) and sends its clients to
``target``; it returns once the target holds every page (the source then stops by itself).
Only a target that shows the secret gets the cache, and only once.
It runs the same client as ``remora kv migrate`` and, with ``progress=True``, prints the same
lines to stderr; ``progress=False`` prints nothing, and a callable gets a dict per step
(``state``, ``present``, ``units``, ``bytes``, ``downtime_ms`` or None, ``elapsed``).

Example (the source serves on port 11211, the target will serve on 11212)::

    # shell 1: remora kv serve -p 11211 -A
    # shell 0: python -c 'import secrets; print(secrets.token_hex(16))' > secret; chmod 600 secret
    # shell 2: remora kv serve -p 11212 --migrate-from 127.0.0.1:11211 --migrate-secret-file secret
    #          (it keeps asking until the source is armed, 30 s by default: --migrate-wait)
    from pathlib import Path
    from remora import kv

    secret = Path("secret").read_text().strip()
    r = kv.migrate("127.0.0.1:11211", "127.0.0.1:11212", secret, wait=60.0)
    print(f"switch-over {r['downtime_ms']} ms, {r['bytes'] >> 20} MiB in {r['total_s']:.2f} s")
    assert kv.migration_stats("127.0.0.1:11212")["migrate_state"] == "complete"

``migrate`` raises ``ValueError`` for a malformed secret, ``TimeoutError`` when no target asks within ``wait`` seconds (the source is
disarmed and serves on), ``RuntimeError`` when the source refuses (e.g. it runs without ``-A``)
or the migration is abandoned by one side, and ``ConnectionError`` when a server cannot be
reached. An exception raised by the progress callable stops the calls and is raised once the
migration has ended: it does not interrupt the migration. ``migration_stats(address)`` is
``stats migration`` of a server as a dict of strings.
"""
from typing import TYPE_CHECKING

from ._native import kv as _m

if TYPE_CHECKING:
    # Types only (dicts at run time): the step a progress callable gets, what migrate returns.
    from ._native.kv import MigrationResult as MigrationResult
    from ._native.kv import MigrationStep as MigrationStep
    from ._native.kv import Item as Item
    from ._native.kv import ClientStats as ClientStats

Client = _m.Client
migrate = _m.migrate
migration_stats = _m.migration_stats

__all__ = ["Client", "migrate", "migration_stats"]
