-- Schema 7: a tenant's keys and thread names are its own, scoped by column (never by
-- joining strings, which two tenants could collide in). A run with no tenant belongs
-- to the deployment itself; '' stands for "no tenant" where a key column needs a value.
ALTER TABLE runs DROP CONSTRAINT runs_key_key;
CREATE UNIQUE INDEX runs_key ON runs ((coalesce(tenant, '')), key);

ALTER TABLE threads ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE threads DROP CONSTRAINT threads_pkey;
ALTER TABLE threads ADD PRIMARY KEY (tenant, id);

ALTER TABLE thread_messages ADD COLUMN tenant text NOT NULL DEFAULT '';
ALTER TABLE thread_messages DROP CONSTRAINT thread_messages_pkey;
ALTER TABLE thread_messages ADD PRIMARY KEY (tenant, thread_id, run_id, idx);
