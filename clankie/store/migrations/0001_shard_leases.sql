-- One lease per shard ("<id>/<count>"): who holds it, its fencing epoch, and when it expires on the database's clock.
-- A lease is taken only when free or expired (the epoch goes up by one), renewed only by its holder at its epoch,
-- and every write for a shard checks the epoch in the same transaction (clankie/store/leases.py).
CREATE TABLE clankie_shard_lease (
    shard       text PRIMARY KEY CHECK (shard ~ '^[0-9]+/[0-9]+$'),
    holder      text,
    epoch       bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    acquired_at timestamptz,
    renewed_at  timestamptz
);
