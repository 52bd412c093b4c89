"""Post-copy live migration of a running ``remora kv serve`` cache: ``remora.kv``.

The source must run with ``-A`` (admin commands). ``migrate(source, target)`` arms it to hand
its cache to the server started with ``--migrate-from SOURCE`` and sends its clients to
``target``; it returns once the target holds every page (the source then stops by itself).
It runs the same client as ``remora kv migrate`` and, with ``progress=True``, prints the same
lines to stderr; ``progress=False`` prints nothing, and a callable gets a dict per step
(``state``, ``present``, ``units``, ``bytes``, ``downtime_ms`` or None, ``elapsed``).

Example (the source serves on port 11211, the target will serve on 11212)::

    # shell 1: remora kv serve -p 11211 -A
    # shell 2: remora kv serve -p 11212 --migrate-from 127.0.0.1:11211
    #          (it keeps asking until the source is armed, 30 s by default: --migrate-wait)
    from remora import kv

    r = kv.migrate("127.0.0.1:11211", "127.0.0.1:11212", wait=60.0)
    print(f"switch-over {r['downtime_ms']} ms, {r['bytes'] >> 20} MiB in {r['total_s']:.2f} s")
    assert kv.migration_stats("127.0.0.1:11212")["migrate_state"] == "complete"

``migrate`` raises ``TimeoutError`` when no target asks within ``wait`` seconds (the source is
disarmed and serves on), ``RuntimeError`` when the source refuses (e.g. it runs without ``-A``)
or the migration is abandoned by one side, and ``ConnectionError`` when a server cannot be
reached. An exception raised by the progress callable stops the calls and is raised once the
migration has ended: it does not interrupt the migration. ``migration_stats(address)`` is
``stats migration`` of a server as a dict of strings.
"""
from ._native import kv as _m

migrate = _m.migrate
migration_stats = _m.migration_stats

__all__ = ["migrate", "migration_stats"]
