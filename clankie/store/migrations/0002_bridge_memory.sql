-- The bridge's durable memory in the PostgreSQL profile: each shard's gateway session (what a RESUME needs) and the
-- de-duplication memory (every admitted message id for the retention window). Written only through fenced writes.
CREATE TABLE clankie_gateway_session (
    shard       text PRIMARY KEY REFERENCES clankie_shard_lease (shard),
    session_id  text NOT NULL,
    resume_url  text NOT NULL,
    seq         bigint,
    since       double precision NOT NULL,
    written_epoch bigint NOT NULL
);

CREATE TABLE clankie_dedupe (
    message_id  text PRIMARY KEY,
    shard       text NOT NULL REFERENCES clankie_shard_lease (shard),
    fingerprint bigint NOT NULL,
    expires     double precision NOT NULL,
    written_epoch bigint NOT NULL
);
CREATE INDEX clankie_dedupe_expires ON clankie_dedupe (expires);
