-- Handback (CLANKIE_DISCORD_SHARD_TAKEOVER=any): whether the holder prefers the shard (a tree serving a shard for
-- another does not), and the claim of a tree that prefers it while another tree serves it: the holder hands it back
-- (releases it) at its next renew, and no third tree may take the released lease while the claim is live.
ALTER TABLE clankie_shard_lease
    ADD COLUMN preferred  boolean NOT NULL DEFAULT true,
    ADD COLUMN claimed_by text,
    ADD COLUMN claimed_at timestamptz;
