-- The fleet bus (runwright.fleet). One row per slot of a fleet root, kept forever so that
-- its generation grows across lives; state NULL: no process holds the slot. A row past
-- expires_at is a life that ended (its TTL passed without a heartbeat).
CREATE TABLE fleet_slots (
    root         text    NOT NULL,
    kind         text    NOT NULL,
    ordinal      integer NOT NULL,
    generation   bigint  NOT NULL,
    state        text    CHECK (state IN ('ready', 'resyncing', 'recycling')),
    host         text,
    pid          integer,
    drain_s      double precision,
    claimed_at   double precision,
    heartbeat_at double precision,
    expires_at   double precision,
    PRIMARY KEY (root, kind, ordinal)
);

-- Queues paused fleet-wide: no worker of the root claims from them, including workers
-- started later (they read this at boot).
CREATE TABLE fleet_paused_queues (
    root      text NOT NULL,
    queue     text NOT NULL,
    paused_at double precision NOT NULL,
    PRIMARY KEY (root, queue)
);
