-- The lanes' session trees in the PostgreSQL profile: one row per segment (a file of the default profile), one row
-- per record of it (the header at position 0, then the entries in write order). A record is kept as `json`, not
-- `jsonb`: the exact text round-trips (key order, numbers, and a message's "\u0000", which jsonb refuses).
-- Written only through fenced writes, by the tree holding the lease of the shard the lane's room is on.
CREATE TABLE clankie_lane_segment (
    lane          text NOT NULL,
    name          text NOT NULL,
    shard         text NOT NULL REFERENCES clankie_shard_lease (shard),
    records       integer NOT NULL CHECK (records >= 0),
    written_epoch bigint NOT NULL,
    PRIMARY KEY (lane, name)
);

CREATE TABLE clankie_lane_record (
    lane          text NOT NULL,
    name          text NOT NULL,
    pos           integer NOT NULL CHECK (pos >= 0),
    record        json NOT NULL,
    written_epoch bigint NOT NULL,
    PRIMARY KEY (lane, name, pos),
    FOREIGN KEY (lane, name) REFERENCES clankie_lane_segment (lane, name) ON DELETE CASCADE ON UPDATE CASCADE
);
