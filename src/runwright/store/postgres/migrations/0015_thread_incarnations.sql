-- Schema 15: a thread's identity beyond its name. Retention reclaims the tombstones of
-- deleted threads, after which the name may name a new thread. `incarnation` tells the
-- two apart: it is the id of the incarnation's first run (run ids only grow and are
-- never reused, so a new incarnation's number is larger than every earlier one's even
-- once their rows are gone, with no counter to keep), 0 until that run is inserted.
-- The runs of the incarnation are those with id >= incarnation. A thread that exists
-- now begins at its oldest run still kept (all of its runs are its own: no name was
-- reused before this version; 1 for one whose runs are all reclaimed: any run is its own).
ALTER TABLE threads ADD COLUMN incarnation bigint NOT NULL DEFAULT 0;
UPDATE threads SET incarnation = coalesce(
    (SELECT min(id) FROM runs WHERE runs.thread = threads.id AND coalesce(runs.tenant, '') = threads.tenant),
    1);
-- The tombstones a sweep looks for, oldest first; live threads are not in it.
CREATE INDEX threads_deleted ON threads (deleted_at) WHERE deleted_at IS NOT NULL;
