-- The last takeover of each shard: the holder whose lease had expired when another tree took the shard, and when
-- (on the database's clock). A release, and a tree taking back its own expired lease, are not takeovers.
ALTER TABLE clankie_shard_lease
    ADD COLUMN taken_from text,
    ADD COLUMN taken_at   timestamptz;
