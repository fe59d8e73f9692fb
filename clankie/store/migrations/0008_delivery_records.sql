-- The service's delivery records in the PostgreSQL profile: one row per delivery id, its whole current record (the
-- fields of the file's line: fingerprint, accepted_at, run, crashed_runs, result, tree), shared by every tree, so a
-- delivery one tree's service settled is answered from its result by the tree that takes its shard over. Written
-- only through fenced writes (the shard of the delivery's room, the epoch of the lease it was written under).
-- Settled rows older than the retention are deleted as the trees write; `clankie_delivery_count` holds how many rows
-- there are, kept in the same statements, so the bound (CLANKIE_DELIVERY_MAX_RETAINED) costs no count of the table.
CREATE TABLE clankie_delivery (
    delivery_id   text PRIMARY KEY,
    shard         text NOT NULL REFERENCES clankie_shard_lease (shard),
    fingerprint   text NOT NULL,
    accepted_at   double precision NOT NULL,
    run           text,
    crashed_runs  text[] NOT NULL,
    settled       boolean NOT NULL,
    result        json,
    tree          text,
    written_epoch bigint NOT NULL,
    CHECK (settled = (result IS NOT NULL))
);
CREATE INDEX clankie_delivery_age ON clankie_delivery (settled, accepted_at);
CREATE TABLE clankie_delivery_count (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    n   bigint NOT NULL
);
INSERT INTO clankie_delivery_count (one, n) VALUES (true, 0);
