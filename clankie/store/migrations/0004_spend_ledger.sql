-- The spend ledger in the PostgreSQL profile: one row per line, by UTC day, in the order appended. A line about a
-- room carries the shard the room is on and the epoch of the lease it was written under (a fenced write); an
-- operator's move (a raise, a reset) belongs to no shard. Kept as `json`: the line round-trips exactly.
CREATE TABLE clankie_spend_line (
    id            bigserial PRIMARY KEY,
    day           text NOT NULL CHECK (day ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$'),
    shard         text REFERENCES clankie_shard_lease (shard),
    record        json NOT NULL,
    written_epoch bigint,
    CHECK ((shard IS NULL) = (written_epoch IS NULL))
);
CREATE INDEX clankie_spend_line_day ON clankie_spend_line (day, id);
