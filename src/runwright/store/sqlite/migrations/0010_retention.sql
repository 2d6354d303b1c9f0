-- Schema 10: retention.

-- A named lease: one process at a time does what it guards (the retention sweep), and
-- a holder that dies loses it when it lapses.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at REAL NOT NULL
);

-- The ranges of run ids reclaimed by retention (a handful: each pass widens one), so
-- that a reader of a reclaimed run is told it expired, not that it never existed.
CREATE TABLE reclaimed (
    lo INTEGER PRIMARY KEY,
    hi INTEGER NOT NULL
);