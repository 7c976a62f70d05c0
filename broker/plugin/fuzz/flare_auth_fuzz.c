/*
 * Robustness harness for flare_auth.c's parsers, built with AddressSanitizer and UndefinedBehaviorSanitizer
 * (scripts/fuzz-broker-plugin.sh). It includes the plugin's source, replaces the broker's functions with stubs
 * (topic matching comes from libmosquitto), and
 *   - signs a few valid tokens, checks they verify, then mutates them at random (byte flips, truncation,
 *     insertion, segment swaps): no mutation that differs from the original may verify;
 *   - feeds random and mutated bytes to the header, claims and control-message scanners and to the
 *     subscription-filter check;
 *   - checks the client-id rule on a table of ids, then on random edits of an allowed id: an edit is allowed only
 *     if it is itself of the allowed form (checked by a second, naive reading of the rule).
 * Deterministic (fixed seed, or argv[2]); argv[1] = iterations. Exit 0 = no finding.
 */
#include "../flare_auth.c"

#include <stdarg.h>

/* --- broker stubs ---------------------------------------------------------------------------------------- */
static const char *stub_username = "flared";
static int kicks;

void mosquitto_log_printf(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}
const char *mosquitto_client_username(const struct mosquitto *client)
{
	(void)client;
	return stub_username;
}
const char *mosquitto_client_id(const struct mosquitto *client)
{
	(void)client;
	return NULL;
}
int mosquitto_broker_publish_copy(const char *clientid, const char *topic, int payloadlen, const void *payload, int qos, bool retain, mosquitto_property *properties)
{
	(void)clientid; (void)topic; (void)payloadlen; (void)payload; (void)qos; (void)retain; (void)properties;
	return MOSQ_ERR_SUCCESS;
}
int mosquitto_kick_client_by_clientid(const char *clientid, bool with_will)
{
	(void)clientid;
	(void)with_will;
	kicks++;
	return MOSQ_ERR_SUCCESS;
}
int mosquitto_kick_client_by_username(const char *username, bool with_will)
{
	(void)username;
	(void)with_will;
	kicks++;
	return MOSQ_ERR_SUCCESS;
}
int mosquitto_callback_register(mosquitto_plugin_id_t *identifier, int event, MOSQ_FUNC_generic_callback cb_func, const void *event_data, void *userdata)
{
	(void)identifier; (void)event; (void)cb_func; (void)event_data; (void)userdata;
	return MOSQ_ERR_SUCCESS;
}
int mosquitto_callback_unregister(mosquitto_plugin_id_t *identifier, int event, MOSQ_FUNC_generic_callback cb_func, const void *event_data)
{
	(void)identifier; (void)event; (void)cb_func; (void)event_data;
	return MOSQ_ERR_SUCCESS;
}

/* --- helpers --------------------------------------------------------------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static size_t b64url_encode(const unsigned char *in, size_t len, char *out)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t n = 0, i = 0;
	for(; i + 3 <= len; i += 3){
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i+1] << 8 | in[i+2];
		out[n++] = alphabet[v >> 18 & 63]; out[n++] = alphabet[v >> 12 & 63];
		out[n++] = alphabet[v >> 6 & 63]; out[n++] = alphabet[v & 63];
	}
	if(len - i == 1){
		uint32_t v = (uint32_t)in[i] << 16;
		out[n++] = alphabet[v >> 18 & 63]; out[n++] = alphabet[v >> 12 & 63];
	}else if(len - i == 2){
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i+1] << 8;
		out[n++] = alphabet[v >> 18 & 63]; out[n++] = alphabet[v >> 12 & 63]; out[n++] = alphabet[v >> 6 & 63];
	}
	out[n] = '\0';
	return n;
}

static void sign(const char *share, const char *role, long long exp, char *out)
{
	char claims[1024], header_b64[128], claims_b64[1536], sig_b64[64];
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	const char *header = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
	int n = snprintf(claims, sizeof(claims),
		"{\"sub\":\"%s\",\"role\":\"%s\",\"iat\":1,\"exp\":%lld,\"acl\":[{\"permission\":\"allow\",\"action\":\"publish\","
		"\"topic\":\"flare/v1/shares/%s/location/#\"},{\"permission\":\"allow\",\"action\":\"subscribe\",\"topic\":\"flare/v1/shares/%s/status\"}]}",
		share, role, exp, share, share);
	b64url_encode((const unsigned char *)header, strlen(header), header_b64);
	b64url_encode((const unsigned char *)claims, (size_t)n, claims_b64);
	snprintf(out, 4096, "%s.%s", header_b64, claims_b64);
	HMAC(EVP_sha256(), token_key, (int)token_key_len, (const unsigned char *)out, strlen(out), mac, &mac_len);
	b64url_encode(mac, mac_len, sig_b64);
	strcat(out, ".");
	strcat(out, sig_b64);
}

static void exercise_bytes(const unsigned char *data, size_t len)
{
	struct claims c;
	char text[4096];
	unsigned char decoded[4096];
	size_t decoded_len;
	size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;

	(void)parse_header(data, len);
	(void)parse_claims(data, len, &c);
	(void)b64url_decode((const char *)data, len, decoded, sizeof(decoded), &decoded_len);

	memcpy(text, data, n);
	text[n] = '\0';
	(void)verify_token("AAAAAAAAAAAAAAAAAAAAAA", text, 1000, &c);

	{
		struct mosquitto_evt_control ed;
		memset(&ed, 0, sizeof(ed));
		ed.payload = data;
		ed.payloadlen = (uint32_t)len;
		(void)on_control(MOSQ_EVT_CONTROL, &ed, NULL);
	}
	if(n > 1 && strlen(text) == n){
		size_t split = (size_t)(rnd() % n);
		char pattern[4096], filter[4096];
		memcpy(pattern, text, split);
		pattern[split] = '\0';
		memcpy(filter, text + split, n - split + 1);
		if(pattern[0] && filter[0] && mosquitto_sub_topic_check(pattern) == MOSQ_ERR_SUCCESS
				&& mosquitto_sub_topic_check(filter) == MOSQ_ERR_SUCCESS){
			(void)filter_within(pattern, filter);
		}
	}
}

/* The client-id rule read naively, as the plugin's comment states it: an independent second reading to hold the
 * plugin's against. */
static bool naive_suffix(const char *s)
{
	size_t n = strlen(s);
	if(n == 0 || n > 64) return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

static bool naive_allowed(const char *id, const char *share, int role)
{
	char base[64];
	size_t blen;
	snprintf(base, sizeof(base), "flare-%s", share);
	blen = strlen(base);
	if(strncmp(id, base, blen) != 0) return false;
	if(role == ROLE_DEVICE){
		if(strcmp(id, base) == 0) return true;
		return id[blen] == '-' && strncmp(id + blen + 1, "watch-", 6) != 0 && naive_suffix(id + blen + 1);
	}
	return strncmp(id + blen, "-watch-", 7) == 0 && naive_suffix(id + blen + 7);
}

static long check_client_ids(long iterations)
{
	const char *share = "9jTgdYONYS8zk5dEPCLI6w";
	const struct { const char *id; int role; bool allowed; } table[] = {
		{ "flare-9jTgdYONYS8zk5dEPCLI6w", ROLE_DEVICE, true },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-phone", ROLE_DEVICE, true },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-watch-x", ROLE_DEVICE, false },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-watch-x", ROLE_WATCH, true },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w", ROLE_WATCH, false },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-phone", ROLE_WATCH, false },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-watch-", ROLE_WATCH, false },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-", ROLE_DEVICE, false },
		{ "flare-9jTgdYONYS8zk5dEPCLI6wX", ROLE_DEVICE, false },
		{ "flare-9jTgdYONYS8zk5dEPCLI6w-a b", ROLE_DEVICE, false },
		{ "flare-AAAAAAAAAAAAAAAAAAAAAA", ROLE_DEVICE, false },
		{ "flared", ROLE_DEVICE, false },
		{ "flared", ROLE_WATCH, false },
		{ "flared-a", ROLE_DEVICE, false },
		{ "flared-epoch", ROLE_DEVICE, false },
		{ "auto-1B7A8E2C-0F0B-4B34-9A3B-6C9C2D1E0F00", ROLE_DEVICE, false },
		{ "", ROLE_DEVICE, false },
	};
	static const char edit_bytes[] = "aZ09-_. /\xc3watch";
	long findings = 0;
	char id[160];

	if(client_id_allowed(NULL, share, ROLE_DEVICE)) findings++;
	for(size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++){
		if(client_id_allowed(table[i].id, share, table[i].role) != table[i].allowed
				|| naive_allowed(table[i].id, share, table[i].role) != table[i].allowed){
			if(findings++ < 5) fprintf(stderr, "client id \"%s\" (%s) judged wrongly\n", table[i].id, table[i].role == ROLE_WATCH ? "watch" : "device");
		}
	}
	for(long i = 0; i < iterations; i++){
		int role = rnd() % 2 ? ROLE_DEVICE : ROLE_WATCH;
		size_t len;
		snprintf(id, sizeof(id), "%s", table[rnd() % 4].id);
		len = strlen(id);
		for(int k = 0, edits = 1 + (int)(rnd() % 3); k < edits && len > 0; k++){
			switch(rnd() % 3){
				case 0: id[rnd() % len] = edit_bytes[rnd() % (sizeof(edit_bytes) - 1)]; break;
				case 1: id[rnd() % (len + 1)] = '\0'; len = strlen(id); break;
				default: if(len + 1 < sizeof(id)){ id[len++] = "-wx9"[rnd() % 4]; id[len] = '\0'; } break;
			}
		}
		if(client_id_allowed(id, share, role) != naive_allowed(id, share, role)){
			if(findings++ < 5) fprintf(stderr, "client id \"%s\" judged differently by the two readings\n", id);
		}
	}
	return findings;
}

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 200000;
	const char *shares[] = { "AAAAAAAAAAAAAAAAAAAAAA", "9jTgdYONYS8zk5dEPCLI6w", "vNDM54NJ8YUA4-AmPOv_Ug" };
	char tokens[3][4096];
	long findings = 0, verified_mutants = 0;

	if(argc > 2) rng_state = strtoull(argv[2], NULL, 10) | 1;
	token_key_len = 32;
	for(size_t i = 0; i < token_key_len; i++) token_key[i] = (unsigned char)(i * 7 + 3);
	if(!grow_clients() || !grow_revocations()) return 2;

	for(int t = 0; t < 3; t++){
		struct claims c;
		sign(shares[t], t == 2 ? "watch" : "device", 4000000000LL, tokens[t]);
		if(verify_token(shares[t], tokens[t], 1000, &c) != V_OK){
			fprintf(stderr, "a valid token did not verify: %s\n", verdict_text(verify_token(shares[t], tokens[t], 1000, &c)));
			return 1;
		}
	}

	findings += check_client_ids(iterations);

	for(long i = 0; i < iterations; i++){
		int t = (int)(rnd() % 3);
		char mutant[4200];
		size_t len = strlen(tokens[t]);
		struct claims c;

		memcpy(mutant, tokens[t], len + 1);
		switch(rnd() % 6){
			case 0: mutant[rnd() % len] = (char)(rnd() % 256); break;                     /* any byte */
			case 1: mutant[rnd() % len] = "AQgw-_.Zz09="[rnd() % 12]; break;              /* plausible byte */
			case 2: mutant[rnd() % (len + 1)] = '\0'; break;                              /* truncation */
			case 3: {                                                                      /* insertion */
				size_t at = rnd() % (len + 1);
				memmove(mutant + at + 1, mutant + at, len - at + 1);
				mutant[at] = "A.=\\\"{}"[rnd() % 7];
				break;
			}
			case 4: mutant[len - 1 - rnd() % 2] ^= 1; break;                              /* last signature bits */
			default: {                                                                     /* another token's part */
				const char *other = tokens[(t + 1) % 3];
				size_t cut = rnd() % len, ocut = rnd() % strlen(other);
				snprintf(mutant + cut, sizeof(mutant) - cut, "%s", other + ocut);
				break;
			}
		}
		if(strcmp(mutant, tokens[t]) != 0 && verify_token(shares[t], mutant, 1000, &c) == V_OK){
			verified_mutants++;
			if(findings++ < 5) fprintf(stderr, "a mutated token verified: %s\n", mutant);
		}
		exercise_bytes((const unsigned char *)mutant, strlen(mutant));

		/* Raw random bytes, and the decoded claims of a token with random edits. */
		{
			unsigned char raw[512];
			size_t raw_len = rnd() % sizeof(raw);
			for(size_t k = 0; k < raw_len; k++) raw[k] = (unsigned char)rnd();
			exercise_bytes(raw, raw_len);
		}
		{
			const char *json = "{\"op\":\"revoke\",\"share_id\":\"AAAAAAAAAAAAAAAAAAAAAA\",\"until\":4000000000,\"x\":[1,{\"y\":\"\\u00e9\\ud83d\\ude00\"}]}";
			char edited[512];
			size_t jlen = strlen(json);
			memcpy(edited, json, jlen + 1);
			for(int k = 0; k < 3; k++) edited[rnd() % jlen] = "\"{}[],:\\u0-9 e."[rnd() % 16];
			exercise_bytes((const unsigned char *)edited, jlen);
		}
	}
	printf("flare_auth fuzz: %ld iterations, %ld mutated tokens verified, %zu revocations recorded, %d kicks\n",
	       iterations, verified_mutants, revocation_count, kicks);
	return findings == 0 ? 0 : 1;
}
