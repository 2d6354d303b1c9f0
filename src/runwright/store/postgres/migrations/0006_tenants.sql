-- Schema 6: tenants. A run belongs to the tenant that submitted it (NULL when auth is
-- off); the HTTP service shows a tenant only its own runs.
ALTER TABLE runs ADD COLUMN tenant text;
CREATE INDEX runs_tenant ON runs (tenant, id) WHERE tenant IS NOT NULL;
