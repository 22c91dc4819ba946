"""Test infrastructure only: applies SQL statements (JSON list on stdin) to an
in-process current ClickHouse (chDB) and prints its version. Used by
schemas/modern_test.go to prove the modern rendering is valid on a current
server."""
import json
import sys

from chdb import session

stmts = json.load(sys.stdin)
s = session.Session()
s.query("CREATE DATABASE IF NOT EXISTS tc")
s.query("USE tc")
for i, st in enumerate(stmts):
    try:
        s.query(st)
    except Exception as e:  # noqa: BLE001 - report which statement failed
        print(f"statement {i + 1} failed: {e}\n{st}", file=sys.stderr)
        sys.exit(1)
tables = s.query("SELECT name FROM system.tables WHERE database = 'tc' ORDER BY name", "CSV")
print(str(s.query("SELECT version()", "CSV")).strip())
print(str(tables).strip())
