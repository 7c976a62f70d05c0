/*
 * flare_auth: Flare's mosquitto 2.0 auth plugin (plugin interface version 5).
 *
 * Devices and integrators log in with username = share id and password = a share token: the HS256 JWT that
 * flared issues (claims sub, role, iat, exp, and an EMQX-5-style acl list). The plugin verifies the token at
 * CONNECT, keeps the verified claims per connected client, and on every publish, subscribe and delivery checks
 * again that the token has not expired, that the share has not been revoked, and that the acl claim allows
 * the topic. A token also binds the client id (client_id_allowed): a session belongs to whoever may take it.
 * Any username that is not a share id is deferred to mosquitto's own password_file / acl_file (the service
 * accounts: flared, an admin).
 *
 * Revocation: flared publishes {"op":"revoke","share_id":"...","until":<unix s>} to $CONTROL/flare/v1 when a
 * share is stopped before its expiry. The plugin kicks that share's clients and refuses its tokens until
 * `until` (the share's expiry, after which every token of the share is expired anyway). Revocations are
 * appended to a file and reloaded (pruned of passed entries) at start-up.
 *
 * Options (mosquitto.conf, after the `plugin` line):
 *   plugin_opt_token_key_file    base64url HS256 key, shared with flared ($FLARE_DATA_DIR/token.key). Required.
 *   plugin_opt_revocations_file  append-only revocation list. Without it revocations last until a restart.
 *   plugin_opt_control_user      the only username allowed to write $CONTROL/flare/v1 (default "flared").
 *   plugin_opt_fix_rate          publishes per second per share and the burst, "R/B" (default "100/6000"; flared's
 *                                FLARE_FIX_RATE_PER_SHARE, which its HTTP ingest applies too). A share's device clients
 *                                beyond it are disconnected before the message is acknowledged, so nothing they were
 *                                told was taken is dropped: they reconnect and send it again.
 *
 * flared's own mark: flared publishes positions of its own (an HTTP fix, a restored last position) with the MQTT v5
 * user property flare-origin, and its bridges skip them. Only flared's service login (plugin_opt_control_user) may
 * send it: any other client publishing it is disconnected before the message is acknowledged, and the message is
 * dropped, so no device can have the broker retain a position flared would never validate or store.
 *
 * Never logged: tokens, keys, payloads. Logged: share ids (they are the usernames mosquitto logs anyway).
 *
 * All callbacks run on the broker's single thread, so the tables below need no locking.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>
#include <mqtt_protocol.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define SHARE_ID_LEN 22
#define MAX_TOKEN_LEN 2048      /* same limit as ShareToken.maximumLength */
#define MAX_HEADER_LEN 256      /* decoded JWT header */
#define MAX_CLAIMS_LEN 1536     /* decoded JWT claims */
#define MAX_RULES 8
#define MAX_TOPIC_LEN 255
#define MAX_KEY_LEN 256
#define MAX_JSON_DEPTH 8
#define CONTROL_TOPIC "$CONTROL/flare/v1"

enum { ACT_PUBLISH = 1, ACT_SUBSCRIBE = 2, ACT_ALL = 3 };
enum { ROLE_DEVICE = 1, ROLE_WATCH = 2 };

enum verdict {
	V_OK = 0,
	V_MALFORMED,
	V_ALGORITHM,
	V_SIGNATURE,
	V_EXPIRED,
	V_WRONG_USER,
	V_REVOKED,
	V_NO_KEY,
	V_CLIENT_ID,
};

static const char *verdict_text(enum verdict v)
{
	switch(v){
		case V_OK: return "ok";
		case V_MALFORMED: return "malformed token";
		case V_ALGORITHM: return "token algorithm is not HS256";
		case V_SIGNATURE: return "token signature does not verify";
		case V_EXPIRED: return "token has expired";
		case V_WRONG_USER: return "token is for another share";
		case V_REVOKED: return "share was stopped";
		case V_NO_KEY: return "no token key loaded";
		case V_CLIENT_ID: return "client id is not one this token may use";
	}
	return "refused";
}

struct rule {
	uint8_t action;
	bool allow;
	char topic[MAX_TOPIC_LEN + 1];
};

struct claims {
	char sub[SHARE_ID_LEN + 1];
	int role;
	long long exp;
	long long iat;
	int rule_count;
	struct rule rules[MAX_RULES];
};

/* What is kept per connected token client: only the rules' topics that exist, in one allocation. */
struct stored_rule {
	uint8_t action;
	bool allow;
	uint16_t offset;
};

struct client_entry {
	struct client_entry *next;
	const struct mosquitto *client;
	/* Disconnected, its last will maybe still to be checked (see on_disconnect). */
	bool leaving;
	char sub[SHARE_ID_LEN + 1];
	long long exp;
	int rule_count;
	struct stored_rule rules[MAX_RULES];
	char topics[];
};

struct revocation {
	struct revocation *next;
	char share[SHARE_ID_LEN + 1];
	long long until;
};

/* A share's publish budget: a token bucket shared by all of the share's device clients. */
struct share_budget {
	struct share_budget *next;
	char share[SHARE_ID_LEN + 1];
	double tokens;
	long long at_ms;
};

/* ---------------------------------------------------------------------------------------------------------- */
/* Plugin state (one broker thread: no locks)                                                                 */

static mosquitto_plugin_id_t *plugin_id;
static char key_path[4096];
static char revocations_path[4096];
static char control_user[128] = "flared";
static unsigned char token_key[MAX_KEY_LEN];
static size_t token_key_len;
static time_t key_last_attempt;

static struct client_entry **clients;
static size_t client_buckets;
static size_t client_count;

/* Clients whose disconnect event has fired, forgotten at the next tick (see on_disconnect). Pointers are only
 * compared, never dereferenced: the broker may have freed the client by then. */
static const struct mosquitto **leaving;
static size_t leaving_count;
static size_t leaving_capacity;

static struct revocation **revocations;
static size_t revocation_buckets;
static size_t revocation_count;
static size_t revocation_file_lines;

static double fix_rate_per_s = 100.0;
static double fix_burst = 6000.0;
static struct share_budget **budgets;
static size_t budget_buckets;
static size_t budget_count;
static long long budgets_pruned_at_ms;
static unsigned long long rate_disconnects;
static unsigned long long rate_disconnects_published;
static long long stats_published_at_ms;
#define STATS_TOPIC "flare/v1/broker/stats"


/* ---------------------------------------------------------------------------------------------------------- */
/* Small helpers                                                                                              */

static int b64url_value(unsigned char c)
{
	if(c >= 'A' && c <= 'Z') return c - 'A';
	if(c >= 'a' && c <= 'z') return c - 'a' + 26;
	if(c >= '0' && c <= '9') return c - '0' + 52;
	if(c == '-') return 62;
	if(c == '_') return 63;
	return -1;
}

/* Strict unpadded base64url; false on a bad character, an impossible length, non-zero leftover bits or overflow. */
static bool b64url_decode(const char *in, size_t len, unsigned char *out, size_t cap, size_t *out_len)
{
	uint32_t acc = 0;
	int bits = 0;
	size_t n = 0;

	if(len % 4 == 1) return false;
	for(size_t i = 0; i < len; i++){
		int v = b64url_value((unsigned char)in[i]);
		if(v < 0) return false;
		acc = ((acc << 6) | (uint32_t)v) & 0xFFFFFFu;
		bits += 6;
		if(bits >= 8){
			bits -= 8;
			if(n >= cap) return false;
			out[n++] = (unsigned char)((acc >> bits) & 0xFFu);
		}
	}
	if(bits > 0 && (acc & ((1u << bits) - 1u)) != 0) return false;
	*out_len = n;
	return true;
}

static bool is_share_id(const char *text)
{
	if(text == NULL) return false;
	for(size_t i = 0; i < SHARE_ID_LEN; i++){
		if(text[i] == '\0' || b64url_value((unsigned char)text[i]) < 0) return false;
	}
	return text[SHARE_ID_LEN] == '\0';
}

/* The client ids a token may use (MQTT client ids name sessions: whoever connects with an id takes that session
 * over, with what the broker queued for it). A device token: "flare-<its share id>" or "flare-<its share
 * id>-<suffix>" with a suffix not starting with "watch-"; a watch token: "flare-<its share id>-watch-<suffix>". A
 * suffix is 1-64 characters of [A-Za-z0-9._-]. So no token can take a service account's session ("flared",
 * "flared-a", the epoch probe's "<id>-epoch"), another share's phone or watcher, its own share's phone (a watcher)
 * or a watcher's (the phone), nor a broker-assigned id ("auto-…": a client sending no id is refused). */
#define MAX_CLIENT_ID_SUFFIX 64
#define WATCH_PREFIX "watch-"

static bool is_suffix(const char *text)
{
	size_t n = 0;
	for(; text[n] != '\0'; n++){
		unsigned char c = (unsigned char)text[n];
		if(n >= MAX_CLIENT_ID_SUFFIX) return false;
		if(!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return false;
	}
	return n > 0;
}

static bool client_id_allowed(const char *id, const char *share, int role)
{
	const char *rest;

	if(id == NULL || strncmp(id, "flare-", 6) != 0 || strncmp(id + 6, share, SHARE_ID_LEN) != 0) return false;
	rest = id + 6 + SHARE_ID_LEN;
	if(role == ROLE_DEVICE){
		if(rest[0] == '\0') return true;
		return rest[0] == '-' && strncmp(rest + 1, WATCH_PREFIX, strlen(WATCH_PREFIX)) != 0 && is_suffix(rest + 1);
	}
	return role == ROLE_WATCH && rest[0] == '-' && strncmp(rest + 1, WATCH_PREFIX, strlen(WATCH_PREFIX)) == 0
		&& is_suffix(rest + 1 + strlen(WATCH_PREFIX));
}

static size_t hash_pointer(const void *p, size_t buckets)
{
	uint64_t x = (uint64_t)(uintptr_t)p;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (size_t)(x & (buckets - 1));
}

static size_t hash_share(const char *share, size_t buckets)
{
	uint64_t h = 1469598103934665603ULL;
	for(size_t i = 0; i < SHARE_ID_LEN; i++){
		h ^= (unsigned char)share[i];
		h *= 1099511628211ULL;
	}
	return (size_t)(h & (buckets - 1));
}

/* ---------------------------------------------------------------------------------------------------------- */
/* A bounded JSON scanner for exactly what the tokens and control messages contain                            */

struct scanner {
	const unsigned char *p;
	const unsigned char *end;
};

static void skip_ws(struct scanner *s)
{
	while(s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static bool expect(struct scanner *s, unsigned char c)
{
	skip_ws(s);
	if(s->p >= s->end || *s->p != c) return false;
	s->p++;
	return true;
}

static bool peek(struct scanner *s, unsigned char c)
{
	skip_ws(s);
	return s->p < s->end && *s->p == c;
}

static int hex_value(unsigned char c)
{
	if(c >= '0' && c <= '9') return c - '0';
	if(c >= 'a' && c <= 'f') return c - 'a' + 10;
	if(c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* Reads a JSON string into out (NUL-terminated, at most cap-1 bytes); out == NULL skips it. Escapes are
 * decoded (\uXXXX to UTF-8, surrogate pairs included); NUL characters and overlong strings are refused. */
static bool scan_string(struct scanner *s, char *out, size_t cap)
{
	size_t n = 0;

	if(!expect(s, '"')) return false;
	while(s->p < s->end){
		unsigned char c = *s->p++;
		unsigned char buf[4];
		size_t blen = 0;

		if(c == '"'){
			if(out) out[n] = '\0';
			return true;
		}
		if(c < 0x20) return false;
		if(c != '\\'){
			buf[0] = c;
			blen = 1;
		}else{
			if(s->p >= s->end) return false;
			c = *s->p++;
			switch(c){
				case '"': case '\\': case '/': buf[0] = c; blen = 1; break;
				case 'b': buf[0] = '\b'; blen = 1; break;
				case 'f': buf[0] = '\f'; blen = 1; break;
				case 'n': buf[0] = '\n'; blen = 1; break;
				case 'r': buf[0] = '\r'; blen = 1; break;
				case 't': buf[0] = '\t'; blen = 1; break;
				case 'u': {
					uint32_t cp = 0;
					if(s->end - s->p < 4) return false;
					for(int i = 0; i < 4; i++){
						int h = hex_value(s->p[i]);
						if(h < 0) return false;
						cp = (cp << 4) | (uint32_t)h;
					}
					s->p += 4;
					if(cp >= 0xD800 && cp <= 0xDBFF){
						uint32_t lo = 0;
						if(s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u') return false;
						for(int i = 0; i < 4; i++){
							int h = hex_value(s->p[2 + i]);
							if(h < 0) return false;
							lo = (lo << 4) | (uint32_t)h;
						}
						if(lo < 0xDC00 || lo > 0xDFFF) return false;
						s->p += 6;
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}else if(cp >= 0xDC00 && cp <= 0xDFFF){
						return false;
					}
					if(cp == 0) return false;
					if(cp < 0x80){
						buf[0] = (unsigned char)cp; blen = 1;
					}else if(cp < 0x800){
						buf[0] = (unsigned char)(0xC0 | (cp >> 6));
						buf[1] = (unsigned char)(0x80 | (cp & 0x3F)); blen = 2;
					}else if(cp < 0x10000){
						buf[0] = (unsigned char)(0xE0 | (cp >> 12));
						buf[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
						buf[2] = (unsigned char)(0x80 | (cp & 0x3F)); blen = 3;
					}else{
						buf[0] = (unsigned char)(0xF0 | (cp >> 18));
						buf[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
						buf[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
						buf[3] = (unsigned char)(0x80 | (cp & 0x3F)); blen = 4;
					}
					break;
				}
				default:
					return false;
			}
		}
		if(out){
			if(n + blen >= cap) return false;
			memcpy(out + n, buf, blen);
		}
		n += blen;
		if(n > MAX_CLAIMS_LEN) return false;
	}
	return false;
}

/* An integer of at most 15 digits (JWT NumericDate as flared writes it); fractions and exponents are refused. */
static bool scan_integer(struct scanner *s, long long *out)
{
	bool negative = false;
	long long value = 0;
	int digits = 0;

	skip_ws(s);
	if(s->p < s->end && *s->p == '-'){
		negative = true;
		s->p++;
	}
	while(s->p < s->end && *s->p >= '0' && *s->p <= '9'){
		if(++digits > 15) return false;
		value = value * 10 + (*s->p - '0');
		s->p++;
	}
	if(digits == 0) return false;
	if(s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E')) return false;
	*out = negative ? -value : value;
	return true;
}

static bool scan_literal(struct scanner *s, const char *word)
{
	size_t len = strlen(word);
	skip_ws(s);
	if((size_t)(s->end - s->p) < len || memcmp(s->p, word, len) != 0) return false;
	s->p += len;
	return true;
}

static bool skip_value(struct scanner *s, int depth)
{
	if(depth > MAX_JSON_DEPTH) return false;
	skip_ws(s);
	if(s->p >= s->end) return false;
	switch(*s->p){
		case '"':
			return scan_string(s, NULL, 0);
		case '{':
			s->p++;
			if(peek(s, '}')){ s->p++; return true; }
			do{
				if(!scan_string(s, NULL, 0) || !expect(s, ':') || !skip_value(s, depth + 1)) return false;
			}while(expect(s, ','));
			return expect(s, '}');
		case '[':
			s->p++;
			if(peek(s, ']')){ s->p++; return true; }
			do{
				if(!skip_value(s, depth + 1)) return false;
			}while(expect(s, ','));
			return expect(s, ']');
		case 't': return scan_literal(s, "true");
		case 'f': return scan_literal(s, "false");
		case 'n': return scan_literal(s, "null");
		default: {
			/* A number: digits, sign, fraction, exponent. */
			const unsigned char *start = s->p;
			while(s->p < s->end && ((*s->p >= '0' && *s->p <= '9') || *s->p == '-' || *s->p == '+'
						|| *s->p == '.' || *s->p == 'e' || *s->p == 'E')) s->p++;
			return s->p > start;
		}
	}
}

static bool at_end(struct scanner *s)
{
	skip_ws(s);
	return s->p == s->end;
}

/* {"alg":"HS256",...}: true only for exactly HS256. */
static enum verdict parse_header(const unsigned char *json, size_t len)
{
	struct scanner s = { json, json + len };
	char key[32];
	char alg[16] = "";
	bool seen_alg = false;

	if(!expect(&s, '{')) return V_MALFORMED;
	if(!peek(&s, '}')){
		do{
			if(!scan_string(&s, key, sizeof(key)) || !expect(&s, ':')) return V_MALFORMED;
			if(!strcmp(key, "alg")){
				if(seen_alg) return V_MALFORMED;
				seen_alg = true;
				if(!peek(&s, '"')) return V_ALGORITHM;
				if(!scan_string(&s, alg, sizeof(alg))) return V_ALGORITHM;
			}else if(!skip_value(&s, 1)){
				return V_MALFORMED;
			}
		}while(expect(&s, ','));
	}
	if(!expect(&s, '}') || !at_end(&s)) return V_MALFORMED;
	if(!seen_alg || strcmp(alg, "HS256") != 0) return V_ALGORITHM;
	return V_OK;
}

static bool parse_rule(struct scanner *s, struct rule *rule)
{
	char key[32], value[16];
	unsigned seen = 0;

	if(!expect(s, '{')) return false;
	if(!peek(s, '}')){
		do{
			if(!scan_string(s, key, sizeof(key)) || !expect(s, ':')) return false;
			if(!strcmp(key, "permission")){
				if(seen & 1 || !scan_string(s, value, sizeof(value))) return false;
				seen |= 1;
				if(!strcmp(value, "allow")) rule->allow = true;
				else if(!strcmp(value, "deny")) rule->allow = false;
				else return false;
			}else if(!strcmp(key, "action")){
				if(seen & 2 || !scan_string(s, value, sizeof(value))) return false;
				seen |= 2;
				if(!strcmp(value, "publish")) rule->action = ACT_PUBLISH;
				else if(!strcmp(value, "subscribe")) rule->action = ACT_SUBSCRIBE;
				else if(!strcmp(value, "all")) rule->action = ACT_ALL;
				else return false;
			}else if(!strcmp(key, "topic")){
				if(seen & 4 || !scan_string(s, rule->topic, sizeof(rule->topic))) return false;
				seen |= 4;
				if(rule->topic[0] == '\0' || mosquitto_sub_topic_check(rule->topic) != MOSQ_ERR_SUCCESS) return false;
			}else if(!skip_value(s, 2)){
				return false;
			}
		}while(expect(s, ','));
	}
	return expect(s, '}') && seen == 7;
}

static bool parse_claims(const unsigned char *json, size_t len, struct claims *c)
{
	struct scanner s = { json, json + len };
	char key[32], role[16];
	unsigned seen = 0;

	memset(c, 0, sizeof(*c));
	if(!expect(&s, '{')) return false;
	if(!peek(&s, '}')){
		do{
			if(!scan_string(&s, key, sizeof(key)) || !expect(&s, ':')) return false;
			if(!strcmp(key, "sub")){
				if(seen & 1 || !scan_string(&s, c->sub, sizeof(c->sub)) || !is_share_id(c->sub)) return false;
				seen |= 1;
			}else if(!strcmp(key, "role")){
				if(seen & 2 || !scan_string(&s, role, sizeof(role))) return false;
				seen |= 2;
				if(!strcmp(role, "device")) c->role = ROLE_DEVICE;
				else if(!strcmp(role, "watch")) c->role = ROLE_WATCH;
				else return false;
			}else if(!strcmp(key, "exp")){
				if(seen & 4 || !scan_integer(&s, &c->exp)) return false;
				seen |= 4;
			}else if(!strcmp(key, "iat")){
				if(seen & 8 || !scan_integer(&s, &c->iat)) return false;
				seen |= 8;
			}else if(!strcmp(key, "acl")){
				if(seen & 16 || !expect(&s, '[')) return false;
				seen |= 16;
				if(!peek(&s, ']')){
					do{
						if(c->rule_count >= MAX_RULES || !parse_rule(&s, &c->rules[c->rule_count])) return false;
						c->rule_count++;
					}while(expect(&s, ','));
				}
				if(!expect(&s, ']')) return false;
			}else if(!skip_value(&s, 1)){
				return false;
			}
		}while(expect(&s, ','));
	}
	return expect(&s, '}') && at_end(&s) && seen == 31;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Key                                                                                                        */

static bool load_key(void)
{
	char text[1024];
	size_t n;
	FILE *f;

	key_last_attempt = time(NULL);
	if(key_path[0] == '\0') return false;
	f = fopen(key_path, "r");
	if(f == NULL) return false;
	n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	while(n > 0 && (text[n-1] == '\n' || text[n-1] == '\r' || text[n-1] == ' ' || text[n-1] == '\t')) n--;
	text[n] = '\0';
	if(!b64url_decode(text, n, token_key, sizeof(token_key), &token_key_len) || token_key_len < 32){
		OPENSSL_cleanse(token_key, sizeof(token_key));
		OPENSSL_cleanse(text, sizeof(text));
		token_key_len = 0;
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: %s is not a valid token key (32+ bytes, base64url)", key_path);
		return false;
	}
	OPENSSL_cleanse(text, sizeof(text));
	mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: token key loaded from %s", key_path);
	return true;
}

/* flared writes the key on its first start, which may come after the broker's: try again, at most once a second. */
static bool have_key(void)
{
	if(token_key_len > 0) return true;
	if(time(NULL) == key_last_attempt) return false;
	return load_key();
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Revocations                                                                                                */

static struct revocation *find_revocation(const char *share)
{
	if(revocation_buckets == 0) return NULL;
	for(struct revocation *r = revocations[hash_share(share, revocation_buckets)]; r; r = r->next){
		if(!memcmp(r->share, share, SHARE_ID_LEN)) return r;
	}
	return NULL;
}

static bool is_revoked(const char *share, time_t now)
{
	struct revocation *r = find_revocation(share);
	return r != NULL && r->until > (long long)now;
}

static bool grow_revocations(void)
{
	size_t buckets = revocation_buckets ? revocation_buckets * 2 : 1024;
	struct revocation **table = calloc(buckets, sizeof(*table));
	if(table == NULL) return false;
	for(size_t i = 0; i < revocation_buckets; i++){
		struct revocation *r = revocations[i];
		while(r){
			struct revocation *next = r->next;
			size_t b = hash_share(r->share, buckets);
			r->next = table[b];
			table[b] = r;
			r = next;
		}
	}
	free(revocations);
	revocations = table;
	revocation_buckets = buckets;
	return true;
}

/* 1: added or extended, 0: already known (flared repeats stops it is not sure the broker heard), -1: no memory. */
static int add_revocation(const char *share, long long until)
{
	struct revocation *r = find_revocation(share);
	if(r){
		if(until <= r->until) return 0;
		r->until = until;
		return 1;
	}
	if(revocation_count >= revocation_buckets && !grow_revocations()) return -1;
	r = calloc(1, sizeof(*r));
	if(r == NULL) return -1;
	memcpy(r->share, share, SHARE_ID_LEN);
	r->until = until;
	size_t b = hash_share(share, revocation_buckets);
	r->next = revocations[b];
	revocations[b] = r;
	revocation_count++;
	return 1;
}

static void prune_revocations(time_t now)
{
	for(size_t i = 0; i < revocation_buckets; i++){
		struct revocation **link = &revocations[i];
		while(*link){
			struct revocation *r = *link;
			if(r->until <= (long long)now){
				*link = r->next;
				free(r);
				revocation_count--;
			}else{
				link = &r->next;
			}
		}
	}
}

/* Writes the live revocations to a temporary file and renames it over the list: the file never loses an entry
 * that has not passed, even if the broker dies half-way. */
static void rewrite_revocations_file(void)
{
	char tmp[sizeof(revocations_path) + 8];
	FILE *f;
	bool ok = true;

	if(revocations_path[0] == '\0') return;
	if(snprintf(tmp, sizeof(tmp), "%s.tmp", revocations_path) >= (int)sizeof(tmp)) return;
	f = fopen(tmp, "w");
	if(f == NULL){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: cannot write %s: %s", tmp, strerror(errno));
		return;
	}
	for(size_t i = 0; i < revocation_buckets && ok; i++){
		for(struct revocation *r = revocations[i]; r && ok; r = r->next){
			ok = fprintf(f, "%s %lld\n", r->share, r->until) > 0;
		}
	}
	ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
	if(fclose(f) != 0) ok = false;
	if(!ok || rename(tmp, revocations_path) != 0){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: cannot rewrite %s", revocations_path);
		unlink(tmp);
		return;
	}
	revocation_file_lines = revocation_count;
}

static void load_revocations(time_t now)
{
	char line[128];
	bool complete = true;
	FILE *f;

	if(revocations_path[0] == '\0') return;
	f = fopen(revocations_path, "r");
	if(f == NULL){
		if(errno != ENOENT){
			mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: cannot read %s: %s", revocations_path, strerror(errno));
		}
		return;
	}
	while(fgets(line, sizeof(line), f)){
		char share[SHARE_ID_LEN + 1];
		long long until;
		size_t len = strlen(line);
		if(len > 0 && line[len-1] != '\n' && !feof(f)){
			/* An overlong line: skip the rest of it. */
			int c;
			while((c = fgetc(f)) != EOF && c != '\n'){}
			continue;
		}
		if(len < SHARE_ID_LEN + 2 || line[SHARE_ID_LEN] != ' ') continue;
		memcpy(share, line, SHARE_ID_LEN);
		share[SHARE_ID_LEN] = '\0';
		if(!is_share_id(share)) continue;
		{
			struct scanner s = { (const unsigned char *)line + SHARE_ID_LEN + 1, (const unsigned char *)line + len };
			if(!scan_integer(&s, &until) || !at_end(&s)) continue;
		}
		if(until > (long long)now && add_revocation(share, until) < 0){
			complete = false;
			break;
		}
	}
	fclose(f);
	if(!complete){
		/* Never rewrite the list from a partial load: that would forget revocations. */
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: out of memory loading %s", revocations_path);
		return;
	}
	rewrite_revocations_file();
	mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: %zu revoked shares loaded", revocation_count);
}

static void persist_revocation(const char *share, long long until, time_t now)
{
	FILE *f;

	if(revocations_path[0] == '\0') return;
	/* Compact once most lines are stale; otherwise append. */
	if(revocation_file_lines > 2 * revocation_count + 1024){
		prune_revocations(now);
		rewrite_revocations_file();
		return;
	}
	f = fopen(revocations_path, "a");
	if(f == NULL){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: cannot append to %s: %s", revocations_path, strerror(errno));
		return;
	}
	if(fprintf(f, "%s %lld\n", share, until) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: cannot append to %s", revocations_path);
	}
	fclose(f);
	revocation_file_lines++;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Connected token clients                                                                                    */

static struct client_entry *find_client(const struct mosquitto *client)
{
	if(client_buckets == 0) return NULL;
	for(struct client_entry *e = clients[hash_pointer(client, client_buckets)]; e; e = e->next){
		if(e->client == client) return e;
	}
	return NULL;
}

static void remove_client(const struct mosquitto *client)
{
	if(client_buckets == 0) return;
	struct client_entry **link = &clients[hash_pointer(client, client_buckets)];
	while(*link){
		struct client_entry *e = *link;
		if(e->client == client){
			*link = e->next;
			free(e);
			client_count--;
			return;
		}
		link = &e->next;
	}
}

static bool grow_clients(void)
{
	size_t buckets = client_buckets ? client_buckets * 2 : 1024;
	struct client_entry **table = calloc(buckets, sizeof(*table));
	if(table == NULL) return false;
	for(size_t i = 0; i < client_buckets; i++){
		struct client_entry *e = clients[i];
		while(e){
			struct client_entry *next = e->next;
			size_t b = hash_pointer(e->client, buckets);
			e->next = table[b];
			table[b] = e;
			e = next;
		}
	}
	free(clients);
	clients = table;
	client_buckets = buckets;
	return true;
}

static bool store_client(const struct mosquitto *client, const struct claims *c)
{
	size_t topics_len = 0;
	struct client_entry *e;

	remove_client(client);
	for(int i = 0; i < c->rule_count; i++) topics_len += strlen(c->rules[i].topic) + 1;
	if(client_count >= client_buckets && !grow_clients()) return false;
	e = calloc(1, sizeof(*e) + topics_len);
	if(e == NULL) return false;
	e->client = client;
	memcpy(e->sub, c->sub, sizeof(e->sub));
	e->exp = c->exp;
	e->rule_count = c->rule_count;
	topics_len = 0;
	for(int i = 0; i < c->rule_count; i++){
		size_t len = strlen(c->rules[i].topic);
		e->rules[i].action = c->rules[i].action;
		e->rules[i].allow = c->rules[i].allow;
		e->rules[i].offset = (uint16_t)topics_len;
		memcpy(e->topics + topics_len, c->rules[i].topic, len + 1);
		topics_len += len + 1;
	}
	size_t b = hash_pointer(client, client_buckets);
	e->next = clients[b];
	clients[b] = e;
	client_count++;
	return true;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Publish budgets per share                                                                                  */

static long long monotonic_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool grow_budgets(void)
{
	size_t buckets = budget_buckets ? budget_buckets * 2 : 1024;
	struct share_budget **table = calloc(buckets, sizeof(*table));
	if(table == NULL) return false;
	for(size_t i = 0; i < budget_buckets; i++){
		struct share_budget *b = budgets[i];
		while(b){
			struct share_budget *next = b->next;
			size_t h = hash_share(b->share, buckets);
			b->next = table[h];
			table[h] = b;
			b = next;
		}
	}
	free(budgets);
	budgets = table;
	budget_buckets = buckets;
	return true;
}

/* Takes one publish from the share's budget: false once it is spent. Out of memory, the publish is let through (a
 * budget is a bound against abuse; losing a fix over it would be worse). */
static bool take_budget(const char *share, long long now_ms)
{
	struct share_budget *b = NULL;
	if(budget_buckets > 0){
		for(b = budgets[hash_share(share, budget_buckets)]; b; b = b->next){
			if(!memcmp(b->share, share, SHARE_ID_LEN)) break;
		}
	}
	if(b == NULL){
		if(budget_count >= budget_buckets && !grow_budgets()) return true;
		b = calloc(1, sizeof(*b));
		if(b == NULL) return true;
		memcpy(b->share, share, SHARE_ID_LEN);
		b->tokens = fix_burst;
		b->at_ms = now_ms;
		size_t h = hash_share(share, budget_buckets);
		b->next = budgets[h];
		budgets[h] = b;
		budget_count++;
	}
	b->tokens += (double)(now_ms - b->at_ms) * fix_rate_per_s / 1000.0;
	if(b->tokens > fix_burst) b->tokens = fix_burst;
	b->at_ms = now_ms;
	if(b->tokens < 1.0) return false;
	b->tokens -= 1.0;
	return true;
}

/* Forgets the budgets that have filled up again (a share quiet for burst/rate seconds): at most once a minute. */
static void prune_budgets(long long now_ms)
{
	if(now_ms - budgets_pruned_at_ms < 60000) return;
	budgets_pruned_at_ms = now_ms;
	for(size_t i = 0; i < budget_buckets; i++){
		struct share_budget **link = &budgets[i];
		while(*link){
			struct share_budget *b = *link;
			if(b->tokens + (double)(now_ms - b->at_ms) * fix_rate_per_s / 1000.0 >= fix_burst){
				*link = b->next;
				free(b);
				budget_count--;
			}else{
				link = &b->next;
			}
		}
	}
}

/* What the plugin counts, retained on STATS_TOPIC for flared's /metrics (only the flared account reads it): at
 * most every 5 s, and only when it changed. A broker restart starts the count again, as a counter's reset. */
static void publish_stats(long long now_ms)
{
	char payload[96];
	int len;

	if(rate_disconnects == rate_disconnects_published || now_ms - stats_published_at_ms < 5000) return;
	len = snprintf(payload, sizeof(payload), "{\"rate_disconnects\":%llu}", rate_disconnects);
	if(len <= 0 || (size_t)len >= sizeof(payload)) return;
	if(mosquitto_broker_publish_copy(NULL, STATS_TOPIC, len, payload, 0, true, NULL) == MOSQ_ERR_SUCCESS){
		rate_disconnects_published = rate_disconnects;
		stats_published_at_ms = now_ms;
	}
}

/* "R/B": R publishes a second (a positive number), a burst of B (at least 1). */
static bool parse_rate(const char *text)
{
	char *end;
	double rate = strtod(text, &end);
	if(end == text || *end != '/' || !(rate > 0) || rate > 1e6) return false;
	const char *burst_text = end + 1;
	double burst = strtod(burst_text, &end);
	if(end == burst_text || *end != '\0' || !(burst >= 1) || burst > 1e9) return false;
	fix_rate_per_s = rate;
	fix_burst = burst;
	return true;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Token verification                                                                                         */

static enum verdict verify_token(const char *username, const char *token, time_t now, struct claims *c)
{
	unsigned char header[MAX_HEADER_LEN], claims_json[MAX_CLAIMS_LEN], signature[64], mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	size_t len, header_len, claims_len, signature_len;
	const char *dot1, *dot2;
	enum verdict v;

	if(token == NULL) return V_MALFORMED;
	len = strnlen(token, MAX_TOKEN_LEN + 1);
	if(len == 0 || len > MAX_TOKEN_LEN) return V_MALFORMED;
	dot1 = memchr(token, '.', len);
	if(dot1 == NULL) return V_MALFORMED;
	dot2 = memchr(dot1 + 1, '.', len - (size_t)(dot1 + 1 - token));
	if(dot2 == NULL || memchr(dot2 + 1, '.', len - (size_t)(dot2 + 1 - token)) != NULL) return V_MALFORMED;
	if(dot1 == token || dot2 == dot1 + 1 || dot2 + 1 == token + len) return V_MALFORMED;

	if(!b64url_decode(token, (size_t)(dot1 - token), header, sizeof(header), &header_len)) return V_MALFORMED;
	v = parse_header(header, header_len);
	if(v != V_OK) return v;

	if(!have_key()) return V_NO_KEY;
	if(!b64url_decode(dot2 + 1, len - (size_t)(dot2 + 1 - token), signature, sizeof(signature), &signature_len)) return V_MALFORMED;
	if(HMAC(EVP_sha256(), token_key, (int)token_key_len, (const unsigned char *)token, (size_t)(dot2 - token), mac, &mac_len) == NULL){
		return V_SIGNATURE;
	}
	if(signature_len != mac_len || CRYPTO_memcmp(signature, mac, mac_len) != 0) return V_SIGNATURE;

	if(!b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), claims_json, sizeof(claims_json), &claims_len)) return V_MALFORMED;
	if(!parse_claims(claims_json, claims_len, c)) return V_MALFORMED;
	if(c->exp <= (long long)now) return V_EXPIRED;
	if(strcmp(c->sub, username) != 0) return V_WRONG_USER;
	if(is_revoked(c->sub, now)) return V_REVOKED;
	return V_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Topic rules                                                                                                */

/* True if every topic that `filter` (a subscription, may hold + and #) can match is matched by `pattern`. */
static bool filter_within(const char *pattern, const char *filter)
{
	const char *p = pattern, *f = filter;

	for(;;){
		size_t plen = strcspn(p, "/"), flen = strcspn(f, "/");
		bool p_last = p[plen] == '\0', f_last = f[flen] == '\0';

		if(plen == 1 && p[0] == '#') return true;
		if(flen == 1 && f[0] == '#') return false;
		if(plen == 1 && p[0] == '+'){
			/* matches any single level, including a + in the filter */
		}else if(plen != flen || memcmp(p, f, plen) != 0){
			return false;
		}
		if(f_last){
			/* "a/#" also matches "a" itself. */
			return p_last || (!strcmp(p + plen, "/#"));
		}
		if(p_last) return false;
		p += plen + 1;
		f += flen + 1;
	}
}

static int check_rules(const struct client_entry *e, const char *topic, int access)
{
	int need;

	switch(access){
		case MOSQ_ACL_WRITE: need = ACT_PUBLISH; break;
		case MOSQ_ACL_READ:
		case MOSQ_ACL_SUBSCRIBE: need = ACT_SUBSCRIBE; break;
		default: return MOSQ_ERR_ACL_DENIED;
	}
	for(int i = 0; i < e->rule_count; i++){
		const char *pattern = e->topics + e->rules[i].offset;
		bool match = false;
		if(!(e->rules[i].action & need)) continue;
		if(access == MOSQ_ACL_SUBSCRIBE){
			match = filter_within(pattern, topic);
		}else if(mosquitto_topic_matches_sub(pattern, topic, &match) != MOSQ_ERR_SUCCESS){
			match = false;
		}
		if(match) return e->rules[i].allow ? MOSQ_ERR_SUCCESS : MOSQ_ERR_ACL_DENIED;
	}
	return MOSQ_ERR_ACL_DENIED;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Callbacks                                                                                                  */

static int on_basic_auth(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_basic_auth *ed = event_data;
	struct claims c;
	enum verdict v;
	(void)event;
	(void)userdata;

	if(!is_share_id(ed->username)){
		remove_client(ed->client);
		return MOSQ_ERR_PLUGIN_DEFER;
	}
	v = verify_token(ed->username, ed->password, time(NULL), &c);
	if(v == V_OK && !client_id_allowed(mosquitto_client_id(ed->client), c.sub, c.role)) v = V_CLIENT_ID;
	if(v != V_OK){
		remove_client(ed->client);
		mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: refused %s: %s", ed->username, verdict_text(v));
		return MOSQ_ERR_AUTH;
	}
	if(!store_client(ed->client, &c)){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: out of memory");
		return MOSQ_ERR_AUTH;
	}
	return MOSQ_ERR_SUCCESS;
}

static int on_acl_check(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_acl_check *ed = event_data;
	const char *username = mosquitto_client_username(ed->client);
	const struct client_entry *e;
	time_t now;
	(void)event;
	(void)userdata;

	int rc;

	if(!is_share_id(username)) return MOSQ_ERR_PLUGIN_DEFER;
	e = find_client(ed->client);
	if(e == NULL || strcmp(e->sub, username) != 0) return MOSQ_ERR_ACL_DENIED;
	now = time(NULL);
	if(e->exp <= (long long)now || is_revoked(e->sub, now)) return MOSQ_ERR_ACL_DENIED;
	rc = check_rules(e, ed->topic, ed->access);
	/* A will is sent as the client leaves: not counted, and nothing to disconnect. */
	if(rc == MOSQ_ERR_SUCCESS && ed->access == MOSQ_ACL_WRITE && !e->leaving && !take_budget(e->sub, monotonic_ms())){
		/* Disconnected here, before mosquitto answers the publish: its PUBACK cannot be sent, so the client keeps the
		 * message and sends it again once it has reconnected (a denied publish alone would be acknowledged and
		 * dropped). mosquitto frees the client only later, so it is safe to use after the kick. */
		const char *id = mosquitto_client_id(ed->client);
		rate_disconnects++;
		mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: share %s over its publish rate; disconnecting a device", e->sub);
		if(id != NULL) mosquitto_kick_client_by_clientid(id, false);
		return MOSQ_ERR_ACL_DENIED;
	}
	return rc;
}

#define ORIGIN_PROPERTY "flare-origin"

static bool has_origin_property(const mosquitto_property *properties)
{
	const mosquitto_property *p = properties;
	bool first = true;

	while(p != NULL){
		char *name = NULL, *value = NULL;
		p = mosquitto_property_read_string_pair(p, MQTT_PROP_USER_PROPERTY, &name, &value, !first);
		first = false;
		if(p == NULL){
			mosquitto_free(name);
			mosquitto_free(value);
			break;
		}
		/* Any case: the name is matched exactly by flared, but no variant of it has a use from a device. */
		bool origin = name != NULL && strcasecmp(name, ORIGIN_PROPERTY) == 0;
		mosquitto_free(name);
		mosquitto_free(value);
		if(origin) return true;
	}
	return false;
}

/* Every publish that passed the ACL, with its MQTT v5 properties (the ACL check does not see them in mosquitto 2.0).
 * flared's mark from anyone but flared's service login: the client is disconnected here, before the PUBACK, and
 * the message dropped (see the top of this file). */
static int on_message(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_message *ed = event_data;
	const char *username, *id;
	(void)event;
	(void)userdata;

	if(ed->properties == NULL || !has_origin_property(ed->properties)) return MOSQ_ERR_SUCCESS;
	username = mosquitto_client_username(ed->client);
	if(username != NULL && strcmp(username, control_user) == 0) return MOSQ_ERR_SUCCESS;
	mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: %s published with flared's mark; disconnecting it", username != NULL && is_share_id(username) ? username : "a client that is not flared");
	id = mosquitto_client_id(ed->client);
	if(id != NULL) mosquitto_kick_client_by_clientid(id, false);
	return MOSQ_ERR_ACL_DENIED;
}

/* Disconnects every client connected with a share token: all were verified with the key in use until now. */
static void kick_token_clients(void)
{
	size_t count = 0, kicked = 0;
	char **ids;

	if(client_count == 0) return;
	ids = calloc(client_count, sizeof(*ids));
	if(ids == NULL){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: out of memory; clients of the old token key stay connected");
		return;
	}
	/* Ids first, kicks after: a kick runs the disconnect callback, which must not meet a walk of the table. */
	for(size_t i = 0; i < client_buckets && count < client_count; i++){
		for(struct client_entry *e = clients[i]; e && count < client_count; e = e->next){
			const char *id = e->leaving ? NULL : mosquitto_client_id(e->client);
			if(id != NULL && (ids[count] = strdup(id)) != NULL) count++;
		}
	}
	for(size_t i = 0; i < count; i++){
		if(mosquitto_kick_client_by_clientid(ids[i], false) == MOSQ_ERR_SUCCESS) kicked++;
		free(ids[i]);
	}
	free(ids);
	mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: token key changed; disconnected %zu clients verified with the old key", kicked);
}

/* SIGHUP: read the token key again. A new key is the emergency stop for every token in circulation, forged ones
 * included: new connections need tokens signed with it, and every client verified with the old key is disconnected
 * (its claims came from a key that is no longer trusted). A key that does not load leaves the old one in use, and
 * the same key read again changes nothing. */
static int on_reload(int event, void *event_data, void *userdata)
{
	unsigned char previous[MAX_KEY_LEN];
	size_t previous_len = token_key_len;
	(void)event;
	(void)event_data;
	(void)userdata;

	memcpy(previous, token_key, sizeof(previous));
	if(!load_key()){
		if(previous_len > 0){
			memcpy(token_key, previous, sizeof(token_key));
			token_key_len = previous_len;
			mosquitto_log_printf(MOSQ_LOG_WARNING, "flare_auth: keeping the token key already loaded");
		}
	}else if(previous_len > 0 && (previous_len != token_key_len || CRYPTO_memcmp(previous, token_key, token_key_len) != 0)){
		kick_token_clients();
	}
	OPENSSL_cleanse(previous, sizeof(previous));
	return MOSQ_ERR_SUCCESS;
}

/* mosquitto 2.0 fires the disconnect event before it sends the client's last will (context__disconnect calls
 * plugin__handle_disconnect, then context__send_will, which checks the will's topic against the ACL as a publish
 * by that client). Forgetting the claims here would deny every will, so a phone whose connection is lost could
 * never say so. The claims stay until the next tick instead, by when the will has been checked and queued: a
 * will is sent in the same call as this event (Flare's devices set no MQTT 5 will delay, which would postpone it
 * past the tick and have it refused). A client that is revoked is kicked without its will. */
static int on_disconnect(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_disconnect *ed = event_data;
	struct client_entry *e;
	(void)event;
	(void)userdata;

	e = find_client(ed->client);
	if(e == NULL || e->leaving) return MOSQ_ERR_SUCCESS;
	if(leaving_count == leaving_capacity){
		size_t capacity = leaving_capacity ? leaving_capacity * 2 : 64;
		const struct mosquitto **grown = realloc(leaving, capacity * sizeof(*grown));
		if(grown == NULL){
			remove_client(ed->client);  /* out of memory: lose this will rather than the entry's memory */
			return MOSQ_ERR_SUCCESS;
		}
		leaving = grown;
		leaving_capacity = capacity;
	}
	e->leaving = true;
	leaving[leaving_count++] = ed->client;
	return MOSQ_ERR_SUCCESS;
}

/* Forgets the clients that disconnected since the last tick. An entry that a new connection at the same address
 * has replaced meanwhile (on_basic_auth stores a fresh one) is not leaving, and stays. */
static int on_tick(int event, void *event_data, void *userdata)
{
	(void)event;
	(void)event_data;
	(void)userdata;
	for(size_t i = 0; i < leaving_count; i++){
		struct client_entry *e = find_client(leaving[i]);
		if(e != NULL && e->leaving) remove_client(leaving[i]);
	}
	leaving_count = 0;
	prune_budgets(monotonic_ms());
	publish_stats(monotonic_ms());
	return MOSQ_ERR_SUCCESS;
}

/* {"op":"revoke","share_id":"<22>","until":<unix seconds>} from the control user only. Always answers success
 * to the broker: a non-zero return would disconnect the sender (flared) over a bad message. */
static int on_control(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_control *ed = event_data;
	const char *username = mosquitto_client_username(ed->client);
	struct scanner s;
	char key[32], op[16] = "", share[SHARE_ID_LEN + 1] = "";
	long long until = 0;
	unsigned seen = 0;
	time_t now = time(NULL);
	(void)event;
	(void)userdata;

	if(username == NULL || strcmp(username, control_user) != 0){
		mosquitto_log_printf(MOSQ_LOG_WARNING, "flare_auth: ignored a control message from %s", username ? username : "(anonymous)");
		return MOSQ_ERR_ACL_DENIED;
	}
	if(ed->payload == NULL || ed->payloadlen == 0 || ed->payloadlen > 1024) goto bad;
	s.p = ed->payload;
	s.end = s.p + ed->payloadlen;
	if(!expect(&s, '{')) goto bad;
	if(!peek(&s, '}')){
		do{
			if(!scan_string(&s, key, sizeof(key)) || !expect(&s, ':')) goto bad;
			if(!strcmp(key, "op")){
				if(!scan_string(&s, op, sizeof(op))) goto bad;
				seen |= 1;
			}else if(!strcmp(key, "share_id")){
				if(!scan_string(&s, share, sizeof(share))) goto bad;
				seen |= 2;
			}else if(!strcmp(key, "until")){
				if(!scan_integer(&s, &until)) goto bad;
				seen |= 4;
			}else if(!skip_value(&s, 1)){
				goto bad;
			}
		}while(expect(&s, ','));
	}
	if(!expect(&s, '}') || !at_end(&s) || seen != 7 || strcmp(op, "revoke") != 0 || !is_share_id(share)) goto bad;

	if(until > (long long)now){
		int added = add_revocation(share, until);
		if(added < 0){
			mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: out of memory");
			return MOSQ_ERR_SUCCESS;
		}
		if(added > 0) persist_revocation(share, until, now);
	}
	mosquitto_kick_client_by_username(share, false);
	mosquitto_log_printf(MOSQ_LOG_NOTICE, "flare_auth: share %s revoked", share);
	return MOSQ_ERR_SUCCESS;
bad:
	mosquitto_log_printf(MOSQ_LOG_WARNING, "flare_auth: ignored a malformed control message");
	return MOSQ_ERR_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Plugin entry points                                                                                        */

int mosquitto_plugin_version(int supported_version_count, const int *supported_versions)
{
	for(int i = 0; i < supported_version_count; i++){
		if(supported_versions[i] == 5) return 5;
	}
	return -1;
}

static bool copy_option(char *dest, size_t cap, const char *value, const char *name)
{
	if(strlen(value) >= cap){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: plugin_opt_%s is too long", name);
		return false;
	}
	memcpy(dest, value, strlen(value) + 1);
	return true;
}

int mosquitto_plugin_init(mosquitto_plugin_id_t *identifier, void **userdata, struct mosquitto_opt *options, int option_count)
{
	time_t now = time(NULL);
	(void)userdata;

	plugin_id = identifier;
	for(int i = 0; i < option_count; i++){
		const char *k = options[i].key, *v = options[i].value;
		if(k == NULL || v == NULL) continue;
		if(!strcmp(k, "token_key_file")){
			if(!copy_option(key_path, sizeof(key_path), v, k)) return MOSQ_ERR_INVAL;
		}else if(!strcmp(k, "revocations_file")){
			if(!copy_option(revocations_path, sizeof(revocations_path), v, k)) return MOSQ_ERR_INVAL;
		}else if(!strcmp(k, "control_user")){
			if(!copy_option(control_user, sizeof(control_user), v, k)) return MOSQ_ERR_INVAL;
		}else if(!strcmp(k, "fix_rate")){
			if(!parse_rate(v)){
				mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: plugin_opt_fix_rate must be RATE/BURST, e.g. 100/6000");
				return MOSQ_ERR_INVAL;
			}
		}
	}
	if(key_path[0] == '\0'){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: plugin_opt_token_key_file is required");
		return MOSQ_ERR_INVAL;
	}
	if(!load_key()){
		mosquitto_log_printf(MOSQ_LOG_WARNING, "flare_auth: no token key in %s yet; share tokens are refused until flared creates it", key_path);
	}
	if(revocations_path[0] == '\0'){
		mosquitto_log_printf(MOSQ_LOG_WARNING, "flare_auth: no plugin_opt_revocations_file; revocations last until a restart");
	}
	if(!grow_clients() || !grow_revocations() || !grow_budgets()) return MOSQ_ERR_NOMEM;
	load_revocations(now);

	if(mosquitto_callback_register(plugin_id, MOSQ_EVT_BASIC_AUTH, on_basic_auth, NULL, NULL) != MOSQ_ERR_SUCCESS
			|| mosquitto_callback_register(plugin_id, MOSQ_EVT_ACL_CHECK, on_acl_check, NULL, NULL) != MOSQ_ERR_SUCCESS
			|| mosquitto_callback_register(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL, NULL) != MOSQ_ERR_SUCCESS
			|| mosquitto_callback_register(plugin_id, MOSQ_EVT_DISCONNECT, on_disconnect, NULL, NULL) != MOSQ_ERR_SUCCESS
			|| mosquitto_callback_register(plugin_id, MOSQ_EVT_TICK, on_tick, NULL, NULL) != MOSQ_ERR_SUCCESS
			|| mosquitto_callback_register(plugin_id, MOSQ_EVT_RELOAD, on_reload, NULL, NULL) != MOSQ_ERR_SUCCESS
			|| mosquitto_callback_register(plugin_id, MOSQ_EVT_CONTROL, on_control, CONTROL_TOPIC, NULL) != MOSQ_ERR_SUCCESS){
		mosquitto_log_printf(MOSQ_LOG_ERR, "flare_auth: cannot register callbacks");
		return MOSQ_ERR_UNKNOWN;
	}
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_plugin_cleanup(void *userdata, struct mosquitto_opt *options, int option_count)
{
	(void)userdata;
	(void)options;
	(void)option_count;

	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_BASIC_AUTH, on_basic_auth, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_ACL_CHECK, on_acl_check, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_DISCONNECT, on_disconnect, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_TICK, on_tick, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_RELOAD, on_reload, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_CONTROL, on_control, CONTROL_TOPIC);
	free(leaving);
	leaving = NULL;
	leaving_count = leaving_capacity = 0;
	for(size_t i = 0; i < client_buckets; i++){
		while(clients[i]){
			struct client_entry *next = clients[i]->next;
			free(clients[i]);
			clients[i] = next;
		}
	}
	free(clients);
	clients = NULL;
	client_buckets = client_count = 0;
	for(size_t i = 0; i < revocation_buckets; i++){
		while(revocations[i]){
			struct revocation *next = revocations[i]->next;
			free(revocations[i]);
			revocations[i] = next;
		}
	}
	free(revocations);
	revocations = NULL;
	revocation_buckets = revocation_count = 0;
	for(size_t i = 0; i < budget_buckets; i++){
		while(budgets[i]){
			struct share_budget *next = budgets[i]->next;
			free(budgets[i]);
			budgets[i] = next;
		}
	}
	free(budgets);
	budgets = NULL;
	budget_buckets = budget_count = 0;
	OPENSSL_cleanse(token_key, sizeof(token_key));
	token_key_len = 0;
	return MOSQ_ERR_SUCCESS;
}
