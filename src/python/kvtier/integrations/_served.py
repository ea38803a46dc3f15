"""What both engine backends do with the ``server`` option: a client of the
host's ``kvtier serve`` (docs/server.md) instead of tiers of their own.

The daemon owns the RAM tier (its arena: ``--host-bytes``), the disk folder
and Redis, so a backend given ``server`` fills in no ``host_bytes`` or
``disk_dir`` default and refuses those options by name. One daemon serves
one layout (``--layout``): a backend checks, when it opens a cache, that the
daemon takes its layout, and otherwise fails at start with the layout JSON
to give the daemon. A daemon that does not answer then is not an error: the
cache's calls are misses (counted) until it does (docs/server.md, A daemon
that is down).
"""

import hashlib
import json
import logging

import kvtier

logger = logging.getLogger("kvtier")

# Options the daemon has and a client of it must not (Cache refuses them too).
DAEMON_OWNS = ("host_bytes", "disk_dir", "remote")
# A key no block has (no block key is a hash over this domain): erasing it
# is how a backend asks the daemon whether it takes the layout.
_PROBE_KEY = hashlib.sha256(b"kvtier-integrations-server-probe\0").digest()


def served(options):
    """Whether the options make the caches clients of a daemon."""
    return options.get("server") is not None


def check_served_options(options, who):
    """Refuses the options the daemon owns (kvtier.InvalidArgument naming
    the option and where it goes instead)."""
    for name in DAEMON_OWNS:
        if name in options:
            raise kvtier.InvalidArgument(
                "%s: %s: not with server (the daemon at %s owns the tiers: give it to "
                "`kvtier serve --%s`)" % (who, name, options["server"], name.replace("_", "-")))


def layout_json(layout):
    """The layout as one line of JSON, what `kvtier serve --layout FILE` reads."""
    return json.dumps(json.loads(layout.to_json()), separators=(",", ":"))


def open_cache(layout, options, who):
    """kvtier.Cache(layout, **options), checked with the daemon (check_daemon)
    when the options name one; a refused cache is closed before raising."""
    cache = kvtier.Cache(layout, **options)
    if served(options):
        try:
            check_daemon(cache, layout, options["server"], who)
        except kvtier.Error:
            cache.close()
            raise
    return cache


def check_daemon(cache, layout, server, who):
    """Asks the daemon once whether it takes `layout`. A daemon that serves
    another layout raises kvtier.FailedPrecondition (with the layout JSON it
    needs); one that does not answer is logged: the cache answers misses
    until it does."""
    try:
        cache.erase(_PROBE_KEY)
    except kvtier.InvalidArgument as e:
        raise kvtier.FailedPrecondition(
            "%s: the kvtier daemon at %s does not serve this layout (%s): one daemon serves "
            "one layout; start it with `kvtier serve --layout FILE`, FILE holding %s"
            % (who, server, e, layout_json(layout))) from None
    except kvtier.Error as e:
        logger.warning("%s: the kvtier daemon at %s does not answer (%s): lookups are misses "
                       "and stores are dropped until it does; it must serve the layout %s",
                       who, server, e, layout_json(layout))
