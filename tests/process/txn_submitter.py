"""One submitter of the keyed-submission race (tests/process/test_transactional_submissions.py):
`python -m tests.process.txn_submitter STORE_URL SEED KEYS OUT GO`. Its App and connection
open, it makes OUT.ready and waits for the file GO (the test makes it once every submitter
is ready, so all begin at once); then, for each of KEYS keys, in
an order of its own, it opens a transaction on the store's database (asyncpg on PostgreSQL,
sqlite3 on SQLite), submits `apps.record` under that key inside it, and commits or rolls
back at random. It writes one JSON line per key to OUT: the key, the run id its submit
answered, whether it said the run existed, and whether it committed."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import sys

import asyncpg

import runwright as rw

from . import apps


async def main(store_url: str, seed: int, keys: int, out_path: str, go: str) -> None:
    rng = random.Random(seed)
    order = list(range(keys))
    rng.shuffle(order)
    app = rw.App(store_url)
    app.tasks.update(apps.app.tasks)
    async with app:
        sqlite_file = store_url.removeprefix("sqlite:///") if store_url.startswith("sqlite") else None
        pg = None if sqlite_file else await asyncpg.connect(store_url.split("?", 1)[0])
        lite = sqlite3.connect(sqlite_file, isolation_level=None, timeout=60) if sqlite_file else None
        try:
            open(f"{out_path}.ready", "w").close()
            while not os.path.exists(go):
                await asyncio.sleep(0.01)
            with open(out_path, "w") as out:
                for k in order:
                    commit = rng.random() < 0.5
                    if lite is not None:
                        lite.execute("BEGIN IMMEDIATE")
                        handle = await app.submit(apps.record, n=k, key=f"k{k}", connection=lite)
                        lite.execute("COMMIT" if commit else "ROLLBACK")
                    else:
                        assert pg is not None
                        transaction = pg.transaction()
                        await transaction.start()
                        handle = await app.submit(apps.record, n=k, key=f"k{k}", connection=pg)
                        await (transaction.commit() if commit else transaction.rollback())
                    out.write(json.dumps({"key": f"k{k}", "id": handle.id, "existed": handle.existed,
                                          "committed": commit}) + "\n")
                    out.flush()
        finally:
            if pg is not None:
                await pg.close()
            if lite is not None:
                lite.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]))
