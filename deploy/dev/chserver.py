#!/usr/bin/env python3
"""Test infrastructure only: serves a current ClickHouse (native TCP and HTTP)
from PyPI's chdb-core wheel, which bundles the ClickHouse engine.

    chserver.py --etc DIR --data DIR --http-port PORT

deploy/dev/clickhouse.sh writes DIR/config.xml (listen host, ports, users
file, query log, ...) and runs this script in the venv it installed; nothing
else should need to.

How it works: chdb's one-shot query path runs the whole clickhouse-local
program, which reads config.xml from its working directory and, since 26.x,
accepts SYSTEM START LISTEN TCP/HTTP. The listeners live as long as the query
that opened them runs, so the query ends with a SELECT that sleeps until it
is killed. SIGTERM (or SIGINT) kills that query over HTTP; clickhouse-local
then shuts its servers down and this process exits.

Pitfalls (chdb-core 26.9.0):
- only the one-shot path can start servers (chdb.connect() sessions fail with
  "start_servers_callback is not set");
- the output format of that query becomes the server-wide default format:
  TabSeparated, ClickHouse's usual one (Null would make every query empty).
"""
import argparse
import os
import signal
import sys
import threading
import urllib.parse
import urllib.request

HOLD_TAG = "tailcause_chserver_hold"
# One row per second for ~31 years; sleepEachRow returns 0, so no row is output.
HOLD = (
    f"SELECT 1 AS {HOLD_TAG} FROM numbers(1000000000) WHERE sleepEachRow(1) = 1 "
    "SETTINGS max_block_size = 1, function_sleep_max_microseconds_per_block = 0"
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--etc", required=True, help="directory holding config.xml (becomes the working directory)")
    ap.add_argument("--data", required=True, help="data directory (the server's path)")
    ap.add_argument("--http-port", type=int, required=True, help="HTTP port of config.xml, used to stop the server")
    a = ap.parse_args()
    etc, data = os.path.abspath(a.etc), os.path.abspath(a.data)
    if not os.path.isfile(os.path.join(etc, "config.xml")):
        sys.exit(f"chserver: {etc}/config.xml is missing")
    os.makedirs(data, exist_ok=True)

    # Importing chdb changes the working directory while it loads; change it
    # to the config's directory only afterwards.
    from chdb import _chdb  # noqa: PLC0415

    os.chdir(etc)
    result = {}

    def serve():
        sql = f"SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; {HOLD}"
        try:
            r = _chdb.query(sql, "TabSeparated", path=data)
            err = r.error_message() if hasattr(r, "error_message") else ""
            result["err"] = err or ""
        except Exception as e:  # noqa: BLE001 - the kill ends the query with an error
            result["err"] = str(e)

    stopping = threading.Event()

    def stop(signum, _frame):
        if stopping.is_set():
            return
        stopping.set()
        q = f"KILL QUERY WHERE query LIKE '%AS {HOLD_TAG}%' AND query NOT LIKE '%KILL QUERY%' ASYNC"
        url = f"http://127.0.0.1:{a.http_port}/?" + urllib.parse.urlencode({"user": "default"})
        try:
            urllib.request.urlopen(url, data=q.encode(), timeout=10).read()
        except Exception as e:  # noqa: BLE001
            print(f"chserver: signal {signum}: killing the serving query over HTTP failed: {e}", file=sys.stderr)
            os._exit(1)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    t = threading.Thread(target=serve, name="clickhouse", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.5)
    err = result.get("err", "")
    if stopping.is_set():
        print("chserver: stopped", file=sys.stderr)
        return 0
    print(f"chserver: the server query ended by itself: {err[:2000]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
