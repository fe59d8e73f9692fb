-- The bridge's ingress journal in the PostgreSQL profile: each shard's journal lines (admit, buffer, wait, close,
-- closed, gap, caught_up), in write order, as the file holds them. A line about a delivery is on the shard of the
-- delivery's room; a gap or caught_up line is copied to every shard the bridge held when it wrote it. Written only
-- through fenced writes (the epoch of the lease it was written under); a tree that takes a shard reads its lines and
-- drains the open deliveries. Compaction replaces a shard's lines by the ones it keeps (open deliveries, and closed
-- ones within the retention, without their text). Kept as `json`: a line round-trips exactly.
CREATE TABLE clankie_journal_line (
    id            bigserial PRIMARY KEY,
    shard         text NOT NULL REFERENCES clankie_shard_lease (shard),
    op            text NOT NULL,
    delivery_id   text,
    line          json NOT NULL,
    bytes         integer NOT NULL CHECK (bytes >= 0),
    written_epoch bigint NOT NULL
);
CREATE INDEX clankie_journal_line_shard ON clankie_journal_line (shard, id);
