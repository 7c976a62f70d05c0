import FlareStore

/// The SQLite store's schema: the first release's CREATE statements and every migration step since, numbered from 1.
/// Step N takes a file at `PRAGMA user_version` N-1 to N, in a transaction of its own, at open (`migrate`); a file
/// with a version above today's was written by a newer release and is refused. Steps are only ever appended, never
/// renumbered or changed: a file made by any earlier release upgrades through the same steps.
///
/// The steps, side by side with the PostgreSQL store's, which has the same numbers (recorded in its `flare_schema`):
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
/// | 17   | table `devices`; `shares`*: duress_at                        | the same                                     |
/// | 18   | `devices`: countdown_s                                       | the same                                     |
/// | 19   | tables `push_subscriptions`, `server_secrets`; `contacts`:   | the same                                     |
/// |      | alerts_hash; escalate_after_s of `devices`, `checkins`,      |                                              |
/// |      | `shares`*; `shares`*: escalation_from, _step, _due_at        |                                              |
///
/// \*: the step makes or adds columns to the `shares` table (steps 1, 4, 7, 8, 10, 13, 14, 17 and 19; see the list below).
///
/// Step 2 is not the same step in the two engines. In SQLite it is the index `shares_newest`, which PostgreSQL made in
/// step 1 already; in PostgreSQL it is the change feed (the function `flare_notify_share` and the trigger
/// `shares_changed`), which SQLite has no step for: one SQLite file serves one instance, so nobody is to be told.
/// The other steps make the same tables, indexes and columns in both engines, each in its own types (PostgreSQL's step 1
/// makes `shares_newest` as well), and PostgreSQL's step 7 adds the trigger that announces a key's revocation
/// (`flare_notify_key`, `owner_keys_changed`).
///
/// The `shares` table's columns (read by `shareColumns` in `SQLiteShareStore+Shares.swift`, all but
/// `locate_delivered_at`), by the step that added each:
///
/// - step 1: `id` INTEGER PRIMARY KEY, `share_id` TEXT UNIQUE, `view_token_hash` BLOB UNIQUE, `name` TEXT,
///   `created_at` INTEGER, `expires_at` INTEGER, `ended_at` INTEGER, `end_reason` TEXT, `history_purged` INTEGER
///   (0 or 1);
/// - step 4: `tracker_state` TEXT, `tracker_since` INTEGER, `tracker_reason` TEXT, `tracker_transport` TEXT,
///   `locate_requested_at` INTEGER, `locate_answered_at` INTEGER, `locate_delivered_at` INTEGER;
/// - step 7: `owner_key` INTEGER (the key that created the share; shares older than the step got the first key);
/// - step 8: `last_answer_id` INTEGER;
/// - step 10: `battery_low_at` INTEGER;
/// - step 13: `checkin_missed_due` INTEGER (the deadline of the share's check-in, once missed);
/// - step 14: `e2e` INTEGER (0 or 1: end-to-end encrypted, its fixes in `sealed_fixes`);
/// - step 17: `duress_at` INTEGER;
/// - step 19: `escalate_after_s` INTEGER, `escalation_from` INTEGER, `escalation_step` INTEGER, `escalation_due_at`
///   INTEGER (the ladder; read by `EscalationRecords`, not `shareColumns`).
extension SQLiteShareStore {
    /// The schema, one numbered step at a time: step N (1-based) takes a database at `user_version` N-1 to N.
    /// A database made by an older release is brought up to date at open; steps are only ever appended.
    static let migrations: [String] = [
        // 1: the first release's schema.
        """
        CREATE TABLE IF NOT EXISTS shares (
            id INTEGER PRIMARY KEY,
            share_id TEXT NOT NULL UNIQUE,
            view_token_hash BLOB NOT NULL UNIQUE,
            name TEXT NOT NULL DEFAULT '',
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            ended_at INTEGER,
            end_reason TEXT,
            history_purged INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX IF NOT EXISTS shares_open ON shares(history_purged) WHERE history_purged = 0;
        CREATE TABLE IF NOT EXISTS fixes (
            share INTEGER NOT NULL REFERENCES shares(id),
            tst INTEGER NOT NULL,
            lat REAL NOT NULL,
            lon REAL NOT NULL,
            acc REAL, alt REAL, vel REAL, cog REAL, batt INTEGER, tid TEXT,
            received_at INTEGER NOT NULL,
            PRIMARY KEY (share, tst, lat, lon)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS owner_keys (
            id INTEGER PRIMARY KEY,
            key_hash BLOB NOT NULL UNIQUE,
            label TEXT NOT NULL,
            created_at INTEGER NOT NULL
        );
        """,
        // 2: `GET /api/v1/shares` lists newest first without sorting every share.
        "CREATE INDEX IF NOT EXISTS shares_newest ON shares(created_at DESC, id DESC);",
        // 3: the instances whose MQTT sessions the broker keeps (one client id per flared process).
        "CREATE TABLE IF NOT EXISTS instances (client_id TEXT PRIMARY KEY, process TEXT NOT NULL, last_seen INTEGER NOT NULL);",
        // 4: the tracker state (live, stale, offline) and "locate now" requests, per share; what the phone says of
        // its battery and connectivity, per fix.
        """
        ALTER TABLE shares ADD COLUMN tracker_state TEXT;
        ALTER TABLE shares ADD COLUMN tracker_since INTEGER;
        ALTER TABLE shares ADD COLUMN tracker_reason TEXT;
        ALTER TABLE shares ADD COLUMN tracker_transport TEXT;
        ALTER TABLE shares ADD COLUMN locate_requested_at INTEGER;
        ALTER TABLE shares ADD COLUMN locate_answered_at INTEGER;
        ALTER TABLE shares ADD COLUMN locate_delivered_at INTEGER;
        ALTER TABLE fixes ADD COLUMN bs INTEGER;
        ALTER TABLE fixes ADD COLUMN conn TEXT;
        """,
        // 5: leases, for jobs that one instance at a time does (keeping the broker's retained state), with the value
        // the job records (the last broker epoch the broker acknowledged).
        "CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until INTEGER NOT NULL, value INTEGER NOT NULL DEFAULT 0);",
        // 6: what is stored of confirming trackers' streams: per share, the newest stream and the number through which
        // every message is handled; the handled numbers beyond it (after a gap) until the gap is filled.
        """
        CREATE TABLE IF NOT EXISTS tracker_marks (share INTEGER PRIMARY KEY, stream INTEGER NOT NULL, through INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS tracker_handled (share INTEGER NOT NULL, stream INTEGER NOT NULL, seq INTEGER NOT NULL,
                                                    PRIMARY KEY (share, stream, seq)) WITHOUT ROWID;
        """,
        // 7: a share belongs to the key that created it; keys are admin (every share) or limited. Keys made before
        // this step were all-powerful and stay so (admin); shares made before it belong to the first key.
        """
        ALTER TABLE owner_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE owner_keys ADD COLUMN max_live INTEGER;
        ALTER TABLE owner_keys ADD COLUMN max_duration_s INTEGER;
        ALTER TABLE owner_keys ADD COLUMN creates_per_hour INTEGER;
        ALTER TABLE owner_keys ADD COLUMN last_used_at INTEGER;
        ALTER TABLE owner_keys ADD COLUMN revoked_at INTEGER;
        ALTER TABLE shares ADD COLUMN owner_key INTEGER;
        UPDATE shares SET owner_key = (SELECT min(id) FROM owner_keys);
        CREATE INDEX IF NOT EXISTS shares_owner ON shares(owner_key, created_at DESC, id DESC);
        CREATE TABLE IF NOT EXISTS key_creations (key INTEGER NOT NULL, at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS key_creations_key ON key_creations(key, at);
        """,
        // 8: the family's answers to the person who shared, kept with the share and purged with its history.
        """
        CREATE TABLE IF NOT EXISTS answers (id INTEGER PRIMARY KEY, share INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS answers_share ON answers(share, id);
        ALTER TABLE shares ADD COLUMN last_answer_id INTEGER;
        """,
        // 9: who opened the link: a hash of (share, viewer id) per browser, never an address, and when it was last
        // seen (the live streams' heartbeat), purged with the share's history.
        """
        CREATE TABLE IF NOT EXISTS viewers (share INTEGER NOT NULL, viewer BLOB NOT NULL, first_seen INTEGER NOT NULL,
                                            last_seen INTEGER NOT NULL, PRIMARY KEY (share, viewer)) WITHOUT ROWID;
        """,
        // 10: the events outbox (each event once, and per destination when to try it next), when the battery was
        // recorded low, and the keys' webhooks (their secrets sealed, never in clear).
        """
        CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, share INTEGER NOT NULL, type TEXT NOT NULL,
                                           at INTEGER NOT NULL, body BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS event_deliveries (event INTEGER NOT NULL, destination TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                                                     next_at INTEGER NOT NULL, PRIMARY KEY (event, destination)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS event_deliveries_due ON event_deliveries(next_at);
        CREATE INDEX IF NOT EXISTS events_id ON events(event_id);
        ALTER TABLE shares ADD COLUMN battery_low_at INTEGER;
        ALTER TABLE owner_keys ADD COLUMN webhook_url TEXT;
        ALTER TABLE owner_keys ADD COLUMN webhook_secret BLOB;
        ALTER TABLE owner_keys ADD COLUMN webhook_previous_secret BLOB;
        ALTER TABLE owner_keys ADD COLUMN webhook_rotated_at INTEGER;
        """,
        // 11: contacts, owned by keys as shares are (listed newest first per key, by row).
        """
        CREATE TABLE IF NOT EXISTS contacts (row INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner_key INTEGER, name TEXT NOT NULL,
                                             email TEXT, phone TEXT, language TEXT NOT NULL, created_at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS contacts_of_key ON contacts(owner_key, row);
        """,
        // 12: a share's personal links, one per contact (only the view token's hash kept; the contact's name as it
        // was, purged with the share's history), and the link a viewer last came through (NULL: the share's own).
        """
        CREATE TABLE IF NOT EXISTS share_links (row INTEGER PRIMARY KEY, link_id TEXT NOT NULL UNIQUE, share INTEGER NOT NULL, contact_id TEXT,
                                                name TEXT NOT NULL, view_token_hash BLOB NOT NULL UNIQUE, created_at INTEGER NOT NULL,
                                                withdrawn_at INTEGER, first_opened_at INTEGER);
        CREATE INDEX IF NOT EXISTS share_links_of_share ON share_links(share, row);
        ALTER TABLE viewers ADD COLUMN link TEXT;
        """,
        // 13: check-ins, one per share made for one: the deadline (fired from here by the lease's holder), the
        // contacts to tell, the zone that ends it on arrival, and where it stands.
        """
        CREATE TABLE IF NOT EXISTS checkins (row INTEGER PRIMARY KEY, checkin_id TEXT NOT NULL UNIQUE, share INTEGER NOT NULL UNIQUE,
                                             share_id TEXT NOT NULL, owner_key INTEGER, due_at INTEGER NOT NULL, grace_ms INTEGER NOT NULL,
                                             message TEXT NOT NULL, contacts TEXT NOT NULL, arrive_lat REAL, arrive_lon REAL,
                                             arrive_radius_m REAL, notify_on_arrival INTEGER NOT NULL, duration_s INTEGER NOT NULL,
                                             state TEXT NOT NULL, state_at INTEGER, created_at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS checkins_armed ON checkins(state, due_at);
        ALTER TABLE shares ADD COLUMN checkin_missed_due INTEGER;
        """,
        // 14: end-to-end encrypted shares. Their fixes are ciphertext the server cannot read, so they have no time or
        // place to be keyed by: the digest of the ciphertext is their key (a QoS 1 redelivery is the same bytes).
        """
        CREATE TABLE IF NOT EXISTS sealed_fixes (share INTEGER NOT NULL, digest BLOB NOT NULL, received_at INTEGER NOT NULL,
                                                 data TEXT NOT NULL, PRIMARY KEY (share, digest));
        CREATE INDEX IF NOT EXISTS sealed_fixes_newest ON sealed_fixes(share, received_at);
        ALTER TABLE shares ADD COLUMN e2e INTEGER NOT NULL DEFAULT 0;
        """,
        // 15: each key's mail budget (FLARE_MAIL_PER_KEY_PER_HOUR), and a contact's links found when it is deleted.
        """
        CREATE TABLE IF NOT EXISTS key_mail_budget (key INTEGER PRIMARY KEY, tokens REAL NOT NULL, at INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS share_links_of_contact ON share_links(contact_id);
        """,
        // 16: what a revoked key left running is stopped (KeyRevocations); keys revoked before this step keep the rule of
        // their day (their shares ran until they ended), so they count as done.
        """
        ALTER TABLE owner_keys ADD COLUMN work_stopped_at INTEGER;
        UPDATE owner_keys SET work_stopped_at = revoked_at WHERE revoked_at IS NOT NULL;
        """,
        // 17: devices, standing SOS triggers (only their secret's hash and their PINs' slow hashes kept), with what every
        // instance must agree on of their SOS; and the duress a share may go on under.
        """
        CREATE TABLE IF NOT EXISTS devices (row INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, owner_key INTEGER NOT NULL, name TEXT NOT NULL,
                                            secret_hash BLOB NOT NULL UNIQUE, contacts TEXT NOT NULL, duration_s INTEGER, message TEXT NOT NULL,
                                            pin TEXT, duress_pin TEXT, created_at INTEGER NOT NULL, sos_share INTEGER, sos_tokens REAL,
                                            sos_tokens_at INTEGER, repeat_mailed_at INTEGER, wrong_pins INTEGER NOT NULL DEFAULT 0,
                                            wrong_pins_since INTEGER, stop_locked_until INTEGER, last_heard_at INTEGER);
        CREATE INDEX IF NOT EXISTS devices_of_key ON devices(owner_key, row);
        CREATE INDEX IF NOT EXISTS devices_by_sos_share ON devices(sos_share);
        ALTER TABLE shares ADD COLUMN duress_at INTEGER;
        """,
        // 18: the SOS page's countdown after a press (0 to 10 s).
        """
        ALTER TABLE devices ADD COLUMN countdown_s INTEGER NOT NULL DEFAULT 5;
        """,
        // 19: Web Push (browsers' subscriptions, per link or per contact's alerts; the server's VAPID key, sealed; the
        // hash of each contact's alerts secret) and the escalation ladder (its setting on devices and check-ins; on a
        // share, where it started, the steps taken and when the next is due).
        """
        CREATE TABLE IF NOT EXISTS push_subscriptions (row INTEGER PRIMARY KEY, share INTEGER, link TEXT, contact TEXT, endpoint TEXT NOT NULL,
                                                       p256dh BLOB NOT NULL, auth BLOB NOT NULL, language TEXT NOT NULL, created_at INTEGER NOT NULL);
        CREATE UNIQUE INDEX IF NOT EXISTS push_of_link ON push_subscriptions(share, coalesce(link, ''), endpoint) WHERE share IS NOT NULL;
        CREATE UNIQUE INDEX IF NOT EXISTS push_of_contact ON push_subscriptions(contact, endpoint) WHERE contact IS NOT NULL;
        CREATE TABLE IF NOT EXISTS server_secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL);
        ALTER TABLE contacts ADD COLUMN alerts_hash BLOB;
        CREATE UNIQUE INDEX IF NOT EXISTS contacts_by_alerts_hash ON contacts(alerts_hash) WHERE alerts_hash IS NOT NULL;
        ALTER TABLE devices ADD COLUMN escalate_after_s INTEGER NOT NULL DEFAULT 300;
        ALTER TABLE checkins ADD COLUMN escalate_after_s INTEGER NOT NULL DEFAULT 300;
        ALTER TABLE shares ADD COLUMN escalate_after_s INTEGER;
        ALTER TABLE shares ADD COLUMN escalation_from INTEGER;
        ALTER TABLE shares ADD COLUMN escalation_step INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE shares ADD COLUMN escalation_due_at INTEGER;
        CREATE INDEX IF NOT EXISTS shares_escalation_due ON shares(escalation_due_at) WHERE escalation_due_at IS NOT NULL;
        """,
    ]
    static var schemaVersion: Int64 { Int64(migrations.count) }

    /// Brings the file to today's schema; returns the version it had (0: a new file).
    static func migrate(_ db: SQLiteDatabase) throws(StoreError) -> Int {
        let versionStatement = try db.statement("PRAGMA user_version")
        _ = try versionStatement.step()
        let version = versionStatement.int64(0)
        versionStatement.reset()
        guard version <= schemaVersion else {
            // A newer release wrote this file: its data may mean things this binary does not know. Refuse, rather
            // than write into it.
            throw StoreError(operation: "open", code: 0, message: "the database has schema version \(version), newer than the \(schemaVersion) this flared knows; run the release that made it, or a newer one")
        }
        for step in Int(version)..<migrations.count {
            try db.transaction { () throws(StoreError) in
                try db.execute(migrations[step])
                try db.execute("PRAGMA user_version = \(step + 1)")
            }
        }
        return Int(version)
    }
}
