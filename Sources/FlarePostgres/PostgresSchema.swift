import FlareStore

/// The PostgreSQL store's schema: the first release's CREATE statements and every migration step since, numbered from 1.
/// At open (`migrate`), in one transaction under an advisory lock (instances starting together migrate once), every
/// step above the highest version recorded in `flare_schema` runs and is recorded there; a database with a version
/// above today's was written by a newer release and is refused. Steps are only ever appended, never renumbered or
/// changed: a database made by any earlier release upgrades through the same steps.
///
/// The steps, side by side with the SQLite store's, which has the same numbers (recorded in its `user_version`):
///
/// | Step | SQLite (`SQLiteSchema.swift`)                                | PostgreSQL (`PostgresSchema.swift`)          |
/// |------|--------------------------------------------------------------|----------------------------------------------|
/// | 1    | tables `shares`*, `fixes`, `owner_keys`                      | the same, and the index `shares_newest`      |
/// | 2    | **the index `shares_newest`** (listing newest first)         | **the change feed** (NOTIFY on share UPDATE) |
/// | 3    | table `instances` (whose MQTT session is whose)              | the same                                     |
/// | 4    | `shares`*: tracker, locate columns; `fixes`: bs, conn        | the same                                     |
/// | 5    | table `leases`                                               | the same                                     |
/// | 6    | tables `tracker_marks`, `tracker_handled`                    | the same                                     |
/// | 7    | keys' kind and limits; `shares`*: owner_key; `key_creations` | the same, and NOTIFY on a key's revocation   |
/// | 8    | table `answers`; `shares`*: last_answer_id                   | the same                                     |
/// | 9    | table `viewers`                                              | the same                                     |
/// | 10   | outbox tables; `shares`*: battery_low_at; keys' webhooks     | the same                                     |
/// | 11   | table `contacts`                                             | the same                                     |
/// | 12   | table `share_links`; `viewers`: link                         | the same                                     |
/// | 13   | table `checkins`; `shares`*: checkin_missed_due              | the same                                     |
/// | 14   | table `sealed_fixes`; `shares`*: e2e                         | the same                                     |
/// | 15   | table `key_mail_budget`; index `share_links_of_contact`      | the same                                     |
/// | 16   | `owner_keys`: work_stopped_at                                | the same                                     |
///
/// \*: the step makes or adds columns to the `shares` table (steps 1, 4, 7, 8, 10, 13 and 14; see the list below).
///
/// Step 2 is not the same step in the two engines. In SQLite it is the index `shares_newest`, which PostgreSQL made in
/// step 1 already; in PostgreSQL it is the change feed (the function `flare_notify_share` and the trigger
/// `shares_changed`), which SQLite has no step for: one SQLite file serves one instance, so nobody is to be told.
/// The other steps make the same tables, indexes and columns in both engines, each in its own types (PostgreSQL's step 1
/// makes `shares_newest` as well), and PostgreSQL's step 7 adds the trigger that announces a key's revocation
/// (`flare_notify_key`, `owner_keys_changed`).
///
/// The `shares` table's columns (read by `shareColumns` in `PostgresShareStore+Shares.swift`, all but
/// `locate_delivered_at`), by the step that added each:
///
/// - step 1: `id` BIGSERIAL PRIMARY KEY, `share_id` TEXT UNIQUE, `view_token_hash` BYTEA UNIQUE, `name` TEXT,
///   `created_at` BIGINT, `expires_at` BIGINT, `ended_at` BIGINT, `end_reason` TEXT, `history_purged` BOOLEAN;
/// - step 4: `tracker_state` TEXT, `tracker_since` BIGINT, `tracker_reason` TEXT, `tracker_transport` TEXT,
///   `locate_requested_at` BIGINT, `locate_answered_at` BIGINT, `locate_delivered_at` BIGINT;
/// - step 7: `owner_key` BIGINT (the key that created the share; shares older than the step got the first key);
/// - step 8: `last_answer_id` BIGINT;
/// - step 10: `battery_low_at` BIGINT;
/// - step 13: `checkin_missed_due` BIGINT (the deadline of the share's check-in, once missed);
/// - step 14: `e2e` BOOLEAN (end-to-end encrypted, its fixes in `sealed_fixes`).
extension PostgresShareStore {
    /// The schema, one numbered step at a time (recorded in `flare_schema`); steps are only ever appended. A database
    /// made by an older release is brought up to date at open, under a lock, so instances starting together do it once.
    static let migrations: [String] = [
        // 1: shares, fixes and owner keys, as in the SQLite store.
        """
        CREATE TABLE shares (
            id BIGSERIAL PRIMARY KEY,
            share_id TEXT NOT NULL UNIQUE,
            view_token_hash BYTEA NOT NULL UNIQUE,
            name TEXT NOT NULL DEFAULT '',
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            ended_at BIGINT,
            end_reason TEXT,
            history_purged BOOLEAN NOT NULL DEFAULT false
        );
        CREATE INDEX shares_open ON shares(id) WHERE NOT history_purged;
        CREATE INDEX shares_newest ON shares(created_at DESC, id DESC);
        CREATE TABLE fixes (
            share BIGINT NOT NULL,
            tst BIGINT NOT NULL,
            lat DOUBLE PRECISION NOT NULL,
            lon DOUBLE PRECISION NOT NULL,
            acc DOUBLE PRECISION, alt DOUBLE PRECISION, vel DOUBLE PRECISION, cog DOUBLE PRECISION, batt INTEGER, tid TEXT,
            received_at BIGINT NOT NULL,
            PRIMARY KEY (share, tst, lat, lon)
        );
        CREATE TABLE owner_keys (
            id BIGSERIAL PRIMARY KEY,
            key_hash BYTEA NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at BIGINT NOT NULL
        );
        """,
        // 2: the change feed. Each committed change is announced with NOTIFY, in the same transaction, so every
        // instance hears of it exactly when it becomes visible, and in commit order. The payload starts with the
        // writer's application_name (its instance), so an instance skips what it did itself.
        // - Shares: by this trigger, on UPDATE only (extended, ended, purged). A transaction that notifies holds a
        //   database-wide lock until it has committed, so notifying each creation would give up group commit (1,800
        //   creations/s here instead of 3,000); another instance learns of a new share when it is first asked for
        //   it, and a sweep ends the expired ones nobody asked for.
        // - Fixes: by `insertFixes` itself, in its transaction, for the new ones only (see there).
        """
        CREATE FUNCTION flare_notify_share() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('flare_shares', current_setting('application_name') || ' ' || NEW.share_id);
            RETURN NULL;
        END $$;
        CREATE TRIGGER shares_changed AFTER UPDATE ON shares FOR EACH ROW EXECUTE FUNCTION flare_notify_share();
        """,
        // 3: the instances whose MQTT sessions the broker keeps (one client id per flared process), so that a live
        // one can take over the session of one that died for good.
        "CREATE TABLE instances (client_id TEXT PRIMARY KEY, process TEXT NOT NULL, last_seen BIGINT NOT NULL);",
        // 4: the tracker state (live, stale, offline) and "locate now" requests, per share; what the phone says of
        // its battery and connectivity, per fix (after `received_at`: the batch COPY writes the columns in order).
        """
        ALTER TABLE shares ADD COLUMN tracker_state TEXT, ADD COLUMN tracker_since BIGINT, ADD COLUMN tracker_reason TEXT,
            ADD COLUMN tracker_transport TEXT, ADD COLUMN locate_requested_at BIGINT, ADD COLUMN locate_answered_at BIGINT,
            ADD COLUMN locate_delivered_at BIGINT;
        ALTER TABLE fixes ADD COLUMN bs INTEGER, ADD COLUMN conn TEXT;
        """,
        // 5: leases, for jobs that one instance at a time does (keeping the broker's retained state), with the value
        // the job records (the last broker epoch the broker acknowledged).
        "CREATE TABLE leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until BIGINT NOT NULL, value BIGINT NOT NULL DEFAULT 0);",
        // 6: what is stored of confirming trackers' streams: per share, the newest stream and the number through which
        // every message is handled (by any instance); the handled numbers beyond it (after a gap) until it is filled.
        """
        CREATE TABLE tracker_marks (share BIGINT PRIMARY KEY, stream BIGINT NOT NULL, through BIGINT NOT NULL);
        CREATE TABLE tracker_handled (share BIGINT NOT NULL, stream BIGINT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (share, stream, seq));
        """,
        // 7: a share belongs to the key that created it; keys are admin (every share) or limited. Keys made before
        // this step were all-powerful and stay so (admin); shares made before it belong to the first key. A key's
        // revocation is announced like a share's change, so that every instance stops accepting it at once.
        """
        ALTER TABLE owner_keys ADD COLUMN admin BOOLEAN NOT NULL DEFAULT true, ADD COLUMN max_live INTEGER,
            ADD COLUMN max_duration_s BIGINT, ADD COLUMN creates_per_hour INTEGER, ADD COLUMN last_used_at BIGINT,
            ADD COLUMN revoked_at BIGINT;
        ALTER TABLE shares ADD COLUMN owner_key BIGINT;
        UPDATE shares SET owner_key = (SELECT min(id) FROM owner_keys);
        CREATE INDEX shares_owner ON shares(owner_key, created_at DESC, id DESC);
        CREATE TABLE key_creations (key BIGINT NOT NULL, at BIGINT NOT NULL);
        CREATE INDEX key_creations_key ON key_creations(key, at);
        CREATE FUNCTION flare_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.revoked_at IS DISTINCT FROM OLD.revoked_at THEN
                PERFORM pg_notify('flare_shares', current_setting('application_name') || ' key:' || NEW.id);
            END IF;
            RETURN NULL;
        END $$;
        CREATE TRIGGER owner_keys_changed AFTER UPDATE ON owner_keys FOR EACH ROW EXECUTE FUNCTION flare_notify_key();
        """,
        // 8: the family's answers, kept with the share and purged with its history. A new answer updates the share's
        // `last_answer_id`, so the share trigger tells every instance to show it.
        """
        CREATE TABLE answers (id BIGSERIAL PRIMARY KEY, share BIGINT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, at BIGINT NOT NULL);
        CREATE INDEX answers_share ON answers(share, id);
        ALTER TABLE shares ADD COLUMN last_answer_id BIGINT;
        """,
        // 9: who opened the link: a hash of (share, viewer id) per browser, never an address, and when it was last
        // seen (any instance's live streams' heartbeat), purged with the share's history.
        """
        CREATE TABLE viewers (share BIGINT NOT NULL, viewer BYTEA NOT NULL, first_seen BIGINT NOT NULL, last_seen BIGINT NOT NULL,
                              PRIMARY KEY (share, viewer));
        """,
        // 10: the events outbox (each event once, and per destination when to try it next), when the battery was
        // recorded low, and the keys' webhooks (their secrets sealed, never in clear).
        """
        CREATE TABLE events (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, share BIGINT NOT NULL, type TEXT NOT NULL,
                             at BIGINT NOT NULL, body TEXT NOT NULL);
        CREATE TABLE event_deliveries (event BIGINT NOT NULL, destination TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                                       next_at BIGINT NOT NULL, PRIMARY KEY (event, destination));
        CREATE INDEX event_deliveries_due ON event_deliveries(next_at);
        CREATE INDEX events_id ON events(event_id);
        ALTER TABLE shares ADD COLUMN battery_low_at BIGINT;
        ALTER TABLE owner_keys ADD COLUMN webhook_url TEXT, ADD COLUMN webhook_secret BYTEA, ADD COLUMN webhook_previous_secret BYTEA,
            ADD COLUMN webhook_rotated_at BIGINT;
        """,
        // 11: contacts, owned by keys as shares are (listed newest first per key, by row).
        """
        CREATE TABLE contacts (row BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner_key BIGINT, name TEXT NOT NULL, email TEXT,
                               phone TEXT, language TEXT NOT NULL, created_at BIGINT NOT NULL);
        CREATE INDEX contacts_of_key ON contacts(owner_key, row);
        """,
        // 12: a share's personal links, one per contact (only the view token's hash kept; the contact's name as it
        // was, purged with the share's history), and the link a viewer last came through (NULL: the share's own).
        """
        CREATE TABLE share_links (row BIGSERIAL PRIMARY KEY, link_id TEXT NOT NULL UNIQUE, share BIGINT NOT NULL, contact_id TEXT,
                                  name TEXT NOT NULL, view_token_hash BYTEA NOT NULL UNIQUE, created_at BIGINT NOT NULL,
                                  withdrawn_at BIGINT, first_opened_at BIGINT);
        CREATE INDEX share_links_of_share ON share_links(share, row);
        ALTER TABLE viewers ADD COLUMN link TEXT;
        """,
        // 13: check-ins, one per share made for one: the deadline (fired from here by the lease's holder), the
        // contacts to tell, the zone that ends it on arrival, and where it stands.
        """
        CREATE TABLE checkins (row BIGSERIAL PRIMARY KEY, checkin_id TEXT NOT NULL UNIQUE, share BIGINT NOT NULL UNIQUE, share_id TEXT NOT NULL,
                               owner_key BIGINT, due_at BIGINT NOT NULL, grace_ms BIGINT NOT NULL, message TEXT NOT NULL, contacts TEXT NOT NULL,
                               arrive_lat DOUBLE PRECISION, arrive_lon DOUBLE PRECISION, arrive_radius_m DOUBLE PRECISION,
                               notify_on_arrival BOOLEAN NOT NULL, duration_s BIGINT NOT NULL, state TEXT NOT NULL, state_at BIGINT,
                               created_at BIGINT NOT NULL);
        CREATE INDEX checkins_armed ON checkins(state, due_at);
        ALTER TABLE shares ADD COLUMN checkin_missed_due BIGINT;
        """,
        // 14: end-to-end encrypted shares. Their fixes are ciphertext the server cannot read, so they have no time or
        // place to be keyed by: the digest of the ciphertext is their key (a QoS 1 redelivery is the same bytes).
        """
        CREATE TABLE sealed_fixes (share BIGINT NOT NULL, digest BYTEA NOT NULL, received_at BIGINT NOT NULL, data TEXT NOT NULL,
                                   PRIMARY KEY (share, digest));
        CREATE INDEX sealed_fixes_newest ON sealed_fixes(share, received_at);
        ALTER TABLE shares ADD COLUMN e2e BOOLEAN NOT NULL DEFAULT false;
        """,
        // 15: each key's mail budget (FLARE_MAIL_PER_KEY_PER_HOUR), and a contact's links found when it is deleted.
        """
        CREATE TABLE key_mail_budget (key BIGINT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, at BIGINT NOT NULL);
        CREATE INDEX share_links_of_contact ON share_links(contact_id);
        """,
        // 16: what a revoked key left running is stopped (KeyRevocations); keys revoked before this step keep the rule of
        // their day (their shares ran until they ended), so they count as done.
        """
        ALTER TABLE owner_keys ADD COLUMN work_stopped_at BIGINT;
        UPDATE owner_keys SET work_stopped_at = revoked_at WHERE revoked_at IS NOT NULL;
        """,
        // 17: devices, standing SOS triggers (only their secret's hash and their PINs' slow hashes kept), with what every
        // instance must agree on of their SOS; and the duress a share may go on under.
        """
        CREATE TABLE devices (row BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner_key BIGINT NOT NULL, name TEXT NOT NULL,
                              secret_hash BYTEA NOT NULL UNIQUE, contacts TEXT NOT NULL, duration_s BIGINT, message TEXT NOT NULL,
                              pin TEXT, duress_pin TEXT, created_at BIGINT NOT NULL, sos_share BIGINT, sos_tokens DOUBLE PRECISION,
                              sos_tokens_at BIGINT, repeat_mailed_at BIGINT, wrong_pins INTEGER NOT NULL DEFAULT 0,
                              wrong_pins_since BIGINT, stop_locked_until BIGINT, last_heard_at BIGINT);
        CREATE INDEX devices_of_key ON devices(owner_key, row);
        CREATE INDEX devices_by_sos_share ON devices(sos_share);
        ALTER TABLE shares ADD COLUMN duress_at BIGINT;
        """,
        // 18: the SOS page's countdown after a press (0 to 10 s).
        """
        ALTER TABLE devices ADD COLUMN countdown_s INTEGER NOT NULL DEFAULT 5;
        """,
        // 19: Web Push (browsers' subscriptions, per link or per contact's alerts; the server's VAPID key, sealed; the
        // hash of each contact's alerts secret) and the escalation ladder (its setting on devices and check-ins; on a
        // share, where it started, the steps taken and when the next is due).
        """
        CREATE TABLE push_subscriptions (row BIGSERIAL PRIMARY KEY, share BIGINT, link TEXT, contact TEXT, endpoint TEXT NOT NULL,
                                         p256dh BYTEA NOT NULL, auth BYTEA NOT NULL, language TEXT NOT NULL, created_at BIGINT NOT NULL);
        CREATE UNIQUE INDEX push_of_link ON push_subscriptions(share, coalesce(link, ''), endpoint) WHERE share IS NOT NULL;
        CREATE UNIQUE INDEX push_of_contact ON push_subscriptions(contact, endpoint) WHERE contact IS NOT NULL;
        CREATE TABLE server_secrets (name TEXT PRIMARY KEY, value BYTEA NOT NULL);
        ALTER TABLE contacts ADD COLUMN alerts_hash BYTEA;
        CREATE UNIQUE INDEX contacts_by_alerts_hash ON contacts(alerts_hash) WHERE alerts_hash IS NOT NULL;
        ALTER TABLE devices ADD COLUMN escalate_after_s INTEGER NOT NULL DEFAULT 300;
        ALTER TABLE checkins ADD COLUMN escalate_after_s INTEGER NOT NULL DEFAULT 300;
        ALTER TABLE shares ADD COLUMN escalate_after_s INTEGER;
        ALTER TABLE shares ADD COLUMN escalation_from BIGINT;
        ALTER TABLE shares ADD COLUMN escalation_step INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE shares ADD COLUMN escalation_due_at BIGINT;
        CREATE INDEX shares_escalation_due ON shares(escalation_due_at) WHERE escalation_due_at IS NOT NULL;
        """,
    ]
    static var schemaVersion: Int { migrations.count }

    /// Brings the database to today's schema; returns the version it had (0: a new database).
    static func migrate(_ connection: PostgresConnection) throws(StoreError) -> Int {
        try connection.transaction(operation: "migrate") { () throws(StoreError) -> Int in
            // One instance migrates at a time; the others wait here and then find nothing to do.
            try connection.execute("SELECT pg_advisory_xact_lock(7418262035)", operation: "migrate")
            try connection.execute("CREATE TABLE IF NOT EXISTS flare_schema (version INTEGER NOT NULL)", operation: "migrate")
            let rows = try connection.execute("SELECT max(version) FROM flare_schema", operation: "migrate")
            let version = Int(rows.optionalInt64(0, 0) ?? 0)
            guard version <= schemaVersion else {
                throw StoreError(operation: "open", postgres: "the database has schema version \(version), newer than the \(schemaVersion) this flared knows; run the release that made it, or a newer one")
            }
            for step in version..<migrations.count {
                try connection.executeScript(migrations[step], operation: "migrate to schema \(step + 1)")
                try connection.execute("INSERT INTO flare_schema (version) VALUES ($1)", [String(step + 1)], operation: "migrate")
            }
            return version
        }
    }
}
