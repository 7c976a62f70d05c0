#pragma once
#include <libpq-fe.h>

// libpq's notice processor prints server notices (e.g. "relation already exists, skipping") to stderr, where they
// would mix with Flare's log. Flare has nothing to learn from them: silence them.
static void flare_pq_ignore_notice(void *arg, const char *message) { (void)arg; (void)message; }

static inline void flare_pq_silence_notices(PGconn *connection) {
    PQsetNoticeProcessor(connection, flare_pq_ignore_notice, 0);
}
