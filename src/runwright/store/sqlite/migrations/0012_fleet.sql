-- The fleet bus (runwright.fleet). One row per slot of a fleet root, kept forever so that
-- its generation grows across lives; state NULL: no process holds the slot. A row past
-- expires_at is a life that ended (its TTL passed without a heartbeat).
CREATE TABLE fleet_slots (
    root         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    ordinal      INTEGER NOT NULL,
    generation   INTEGER NOT NULL,
    state        TEXT    CHECK (state IN ('ready', 'resyncing', 'recycling')),
    host         TEXT,
    pid          INTEGER,
    drain_s      REAL,
    claimed_at   REAL,
    heartbeat_at REAL,
    expires_at   REAL,
    PRIMARY KEY (root, kind, ordinal)
) WITHOUT ROWID;

-- Queues paused fleet-wide: no worker of the root claims from them, including workers
-- started later (they read this at boot).
CREATE TABLE fleet_paused_queues (
    root      TEXT NOT NULL,
    queue     TEXT NOT NULL,
    paused_at REAL NOT NULL,
    PRIMARY KEY (root, queue)
) WITHOUT ROWID;

-- SQLite has no notification between processes: fleet messages are rows that every
-- process of the machine polls for, after the last id it read; old ones are pruned.
CREATE TABLE fleet_messages (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    root    TEXT NOT NULL,
    body    TEXT NOT NULL,
    sent_at REAL NOT NULL
);
