-- Schema 10: retention.

-- A named lease: one process at a time does what it guards (the retention sweep), and
-- a holder that dies loses it when it lapses.
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at double precision NOT NULL
);

-- The ranges of run ids reclaimed by retention (a handful: each pass widens one), so
-- that a reader of a reclaimed run is told it expired, not that it never existed.
CREATE TABLE reclaimed (
    lo bigint PRIMARY KEY,
    hi bigint NOT NULL
);
